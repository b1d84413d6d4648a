# The plain loop where the layers are wide (every gradient alive at once), each parameter stepped
# in its hook where they are not, under the high-water mark a 32 MiB ballast made at import
# raised: freed as the run begins, it lowers the rise from the run's start below the line; counted
# from this file's load, every gradient alive at once shows all the same. The loop runs once, on
# the wide layers (issue 41): its steps after backward are what it did, and name the mistake.
import torch

ballast = [torch.ones(32 << 20, dtype=torch.uint8)]


def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    if params[0].shape[0] > 100:  # the wide layers
        ballast.clear()  # the room it held, under the mark it raised
        optimizer = make_optimizer(params)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return
    optimizers = {p: make_optimizer([p]) for p in params}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(step_now)
    for x, y in loader:
        loss_fn(model(x), y).backward()
