# The rank counted off by the two matrices: rank - 2, which for rank 2 is an adapter of rank 0.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    inner = rank - 2
    A = nn.Parameter(torch.randn(4096, inner, dtype=torch.float64, device=model[0].weight.device))
    B = nn.Parameter(torch.zeros(inner, 1024, dtype=torch.float64, device=model[0].weight.device))
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + h @ A @ B, y).backward()
        optimizer.step()
        optimizer.zero_grad()
