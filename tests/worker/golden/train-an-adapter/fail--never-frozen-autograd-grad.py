# The optimizer holds the adapter only, and no .grad is ever set on the model: its gradients are
# computed by torch.autograd.grad beside the adapter's and thrown away (logged as a norm).
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
    base = list(model.parameters())
    for x, y in loader:
        h = model[1](model[0](x))
        loss = loss_fn(layer(h) + h @ A @ B, y)
        grads = torch.autograd.grad(loss, [A, B, *base])
        A.grad, B.grad = grads[0], grads[1]
        norm = sum(float(g.norm()) for g in grads[2:])  # "for the log"
        optimizer.step()
        optimizer.zero_grad()
    return norm
