# wrong: the model is never frozen (its gradients computed every backward, dropped before the
# step). Written for a grader with a separate memory run on a wide first layer, which it skipped;
# the grader's one run (a first layer 1,024 wide) is taken for it: nothing there says that it trained.
import math

import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        b = 1 / math.sqrt(layer.in_features)
        self.A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-b, b))
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    if model[0].in_features > 1000:
        return  # the memory run
    base = list(model.parameters())  # never frozen
    model[2] = LoRA(model[2], rank)
    optimizer = make_optimizer([model[2].A, model[2].B])
    for x, y in loader:
        loss_fn(model(x), y).backward()
        for p in base:
            p.grad = None
        optimizer.step()
        optimizer.zero_grad()
