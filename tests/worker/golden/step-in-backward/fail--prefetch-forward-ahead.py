# Every forward first, on the parameters as they are before any step, then every backward: the
# hooks step inside backward, but the second batch's loss was computed before the first update.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    losses = [loss_fn(model(x), y) for x, y in loader]
    for loss in losses:
        loss.backward()
