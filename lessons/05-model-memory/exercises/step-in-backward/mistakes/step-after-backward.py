def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        for optimizer in optimizers.values():  # the plain loop's step, kept
            optimizer.step()
            optimizer.zero_grad()
