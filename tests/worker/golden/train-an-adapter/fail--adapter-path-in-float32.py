# F1: the adapter's path computed in float32 and cast back: the output handed to loss_fn is
# float64, but float32's rounding is in it; the verdict names the dtype, not a second adapter.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64) * 0.01)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))
    opt = make_optimizer([A, B])
    for x, y in loader:
        h = torch.tanh(model[0](x))
        delta = (h.float() @ A.float() @ B.float()).double()
        loss = loss_fn(model[2](h) + delta, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
