# F8, the other side: the start read late must not let an adapter that never trains pass: A and B
# both set to zero after the optimizer is made (no gradient reaches either: nothing moves).
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64))
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))
    opt = make_optimizer([A, B])
    with torch.no_grad():
        A.zero_()
    for x, y in loader:
        h = torch.tanh(model[0](x))
        loss_fn(model[2](h) + h @ A @ B, y).backward()
        opt.step()
        opt.zero_grad()
