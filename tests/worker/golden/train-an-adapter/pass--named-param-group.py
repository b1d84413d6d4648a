# right: the adapter's optimizer made from one param group of named parameters, as recipes that
# split weight decay build it (red team 8: the dict reached the harness's step as a tensor:
# "Your code raised AttributeError: 'dict' object has no attribute 'numel'")
import torch
from torch import nn


class Adapted(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        self.down = nn.Parameter(torch.randn(layer.in_features, rank, **like) / layer.in_features**0.5)
        self.up = nn.Parameter(torch.zeros(rank, layer.out_features, **like))

    def forward(self, h):
        return self.layer(h) + (h @ self.down) @ self.up


def train(model, loader, loss_fn, make_optimizer, rank):
    for p in model.parameters():
        p.requires_grad = False
    model[2] = Adapted(model[2], rank)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = make_optimizer([{"params": [p for _, p in trainable], "weight_decay": 0.0}])
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
