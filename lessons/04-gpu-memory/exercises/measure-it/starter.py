import torch
from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
