# F2: LoRA through torch.nn.utils.parametrize: the weight is recomputed as W + (A @ B).T at every
# forward, a full-size update (and its gradient) materialised: refused on memory, named so.
import torch
from torch import nn
from torch.nn.utils import parametrize


class LowRank(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64) * 0.01)
        self.B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))

    def forward(self, weight):
        return weight + (self.A @ self.B).T


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    lowrank = LowRank(rank)
    parametrize.register_parametrization(model[2], "weight", lowrank)
    opt = make_optimizer([lowrank.A, lowrank.B])
    for x, y in loader:
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()
