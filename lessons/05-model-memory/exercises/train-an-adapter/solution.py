import math

import torch
from torch import nn


class LoRA(nn.Module):
    """A frozen layer plus a trainable low-rank update: layer(h) + h @ A @ B."""

    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        like = {"dtype": layer.weight.dtype, "device": layer.weight.device}  # float64, the model's device
        bound = 1 / math.sqrt(layer.in_features)  # as nn.Linear starts its weight
        self.A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-bound, bound))
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))  # starts at 0

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)  # before any backward: no gradient, no state for the model
    model[2] = LoRA(model[2], rank)
    optimizer = make_optimizer([model[2].A, model[2].B])  # the adapter only
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
