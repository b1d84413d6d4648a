# Batches listed first, a no_grad evaluation before training (no backward, no step), zero_grad in the hook.
import torch


def train(model, loader, loss_fn, make_optimizer):
    batches = list(loader)
    with torch.no_grad():
        before = [loss_fn(model(x), y).item() for x, y in batches]
    optimizers = [make_optimizer([p]) for p in model.parameters()]
    for p, optimizer in zip(model.parameters(), optimizers, strict=True):

        def hook(param, optimizer=optimizer):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        p.register_post_accumulate_grad_hook(hook)
    for x, y in batches:
        loss_fn(model(x), y).backward()
    print(f"loss before: {before}")
