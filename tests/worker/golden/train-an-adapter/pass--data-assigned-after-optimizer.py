# F8: placeholders handed to the optimizer, then their values assigned through .data (a new
# storage each) before the first batch.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    for p in model.parameters():
        p.requires_grad_(False)
    last = model[2]
    A = nn.Parameter(torch.zeros(4096, rank, dtype=torch.float64))
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))
    opt = make_optimizer([A, B])
    torch.manual_seed(3)
    A.data = torch.randn(4096, rank, dtype=torch.float64) * 0.02
    B.data = torch.zeros(rank, 1024, dtype=torch.float64)
    for x, y in loader:
        h = model[1](model[0](x))
        loss = loss_fn(last(h) + (h @ A) @ B, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
