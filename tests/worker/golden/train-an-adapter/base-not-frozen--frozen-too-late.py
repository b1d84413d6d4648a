# Frozen only after the first backward: the gradients it made stay in .grad.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64, device=model[0].weight.device) * 0.1)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64, device=model[0].weight.device))
    optimizer = make_optimizer([A, B])
    for i, (x, y) in enumerate(loader):
        h = model[1](model[0](x))
        loss_fn(model[2](h) + h @ A @ B, y).backward()
        if i == 0:
            model.requires_grad_(False)
        optimizer.step()
        optimizer.zero_grad()
