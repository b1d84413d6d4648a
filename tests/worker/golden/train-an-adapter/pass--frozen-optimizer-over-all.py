# Frozen first, then an optimizer over every parameter: the frozen ones never get a gradient,
# so Adam skips them and keeps no state for them.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.empty(4096, rank, dtype=torch.float64, device=model[0].weight.device))
    nn.init.kaiming_uniform_(A)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64, device=model[0].weight.device))
    optimizer = make_optimizer([*model.parameters(), A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + h @ A @ B, y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
