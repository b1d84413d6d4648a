# F1: the loss computed in float32 (the output cast down before loss_fn): the adapter's steps
# drift from float64 Adam by float32's rounding; the verdict names the dtype.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64) * 0.01)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))
    opt = make_optimizer([A, B])
    for x, y in loader:
        h = torch.tanh(model[0](x))
        out = model[2](h) + h @ A @ B
        loss = loss_fn(out.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
