# F8: the adapter's parameters are made empty, handed to the optimizer, and only then given
# their start (reset_parameters after make_optimizer): a right loop in another order.
import math

import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        kw = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        self.A = nn.Parameter(torch.empty(layer.in_features, rank, **kw))
        self.B = nn.Parameter(torch.empty(rank, layer.out_features, **kw))

    def reset_parameters(self):
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.B.zero_()

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = LoRA(model[2], rank)
    optimizer = make_optimizer([model[2].A, model[2].B])
    model[2].reset_parameters()  # after the optimizer is made
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
