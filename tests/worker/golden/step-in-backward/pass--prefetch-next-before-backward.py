# The next batch taken with next() before this batch's backward, hooks as functools.partial.
import functools


def _step(optimizer, p):
    optimizer.step()
    p.grad = None


def train(model, loader, loss_fn, make_optimizer):
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(functools.partial(_step, make_optimizer([p])))
    it = iter(loader)
    batch = next(it, None)
    while batch is not None:
        x, y = batch
        loss = loss_fn(model(x), y)
        batch = next(it, None)  # fetched before backward
        loss.backward()
