# The hooks set up inside the loop, on every batch, with zero_grad releasing the gradient.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def hook(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    for _step, (x, y) in enumerate(loader):
        for p in optimizers:
            p.register_post_accumulate_grad_hook(hook)
        loss_fn(model(x), y).backward()
