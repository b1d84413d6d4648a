# the model cast to the low dtype instead of autocast, once per configuration, the batch cast to
# match and the loss taken in float32: low-precision weights, which the optimizer updates
import torch
from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    if precision is not torch.float32:
        model = model.to(dtype=precision)
    run = (lambda f, h: recompute(f, h, use_reentrant=False)) if checkpoint else (lambda f, h: f(h))
    optimizer.zero_grad()
    for step, (inputs, targets) in enumerate(loader):
        hidden = inputs.to(dtype=precision)
        for block in model.blocks:
            hidden = run(block, hidden)
        loss = loss_fn(model.head(hidden).to(torch.float32), targets) / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
