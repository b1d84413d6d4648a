# Nothing frozen and the model's parameters chained into the optimizer with the adapter's.
import itertools

import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64, device=model[0].weight.device) / rank)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64, device=model[0].weight.device))
    optimizer = make_optimizer(itertools.chain(model.parameters(), [A, B]))
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + h @ A @ B, y).backward()
        optimizer.step()
        optimizer.zero_grad()
