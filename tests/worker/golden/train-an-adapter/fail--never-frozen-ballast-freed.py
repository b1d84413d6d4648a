# Never frozen, its gradients dropped before each step, and a 64 MiB ballast made at import freed
# as the run on a wide base begins: the base's gradient fits under the mark the ballast raised, so
# the rise from that run's start is small; counted from this file's load, it shows.
import math

import torch
from torch import nn

ballast = [torch.ones(64 << 20, dtype=torch.uint8)]


def train(model, loader, loss_fn, make_optimizer, rank):
    if model[0].in_features > 1000:
        ballast.clear()
    layer = model[2]
    like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
    bound = 1 / math.sqrt(layer.in_features)
    A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-bound, bound))
    B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        model.zero_grad(set_to_none=True)
        optimizer.step()
        optimizer.zero_grad()
