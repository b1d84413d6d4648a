def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for x, y in loader:
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(step_now)  # one more hook at every batch
        loss_fn(model(x), y).backward()
