# The hook steps and zeroes in place: the gradient stays allocated (zeros), so all stay alive.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def hook(p):
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=False)

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
