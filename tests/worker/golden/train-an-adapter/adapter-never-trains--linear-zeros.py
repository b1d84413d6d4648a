# Two bias-free nn.Linear layers, both zeroed "so that the adapter adds nothing at first":
# then neither ever gets a gradient that is not zero.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    kw = {"bias": False, "dtype": torch.float64, "device": model[0].weight.device}
    down, up = nn.Linear(4096, rank, **kw), nn.Linear(rank, 1024, **kw)
    for layer in (down, up):
        nn.init.zeros_(layer.weight)
    optimizer = make_optimizer([down.weight, up.weight])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + up(down(h)), y).backward()
        optimizer.step()
        optimizer.zero_grad()
