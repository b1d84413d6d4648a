# Both adapter layers keep nn.Linear's default (random) initialisation.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    down = nn.Linear(4096, rank, bias=False, dtype=torch.float64, device=model[0].weight.device)
    up = nn.Linear(rank, 1024, bias=False, dtype=torch.float64, device=model[0].weight.device)
    optimizer = make_optimizer([*down.parameters(), *up.parameters()])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + up(down(h)), y).backward()
        optimizer.step()
        optimizer.zero_grad()
