# An adapter of the wrong shape: beside the first layer (1,024 -> 4,096), not the last.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(1024, rank, dtype=torch.float64, device=model[0].weight.device) / rank)
    B = nn.Parameter(torch.zeros(rank, 4096, dtype=torch.float64, device=model[0].weight.device))
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = torch.tanh(model[0](x) + x @ A @ B)
        loss_fn(model[2](h), y).backward()
        optimizer.step()
        optimizer.zero_grad()
