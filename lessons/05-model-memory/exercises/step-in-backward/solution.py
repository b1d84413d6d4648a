def train(model, loader, loss_fn, make_optimizer):
    """Each parameter stepped by its own Adam as soon as its gradient is ready."""
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None  # freed before the next parameter's gradient arrives

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)  # once, before the loop
    for x, y in loader:
        loss_fn(model(x), y).backward()  # the updates happen in here
