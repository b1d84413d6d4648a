# The adapter as two bias-free nn.Linear layers (their weights are A and B transposed), the
# optimizer over whatever still requires a gradient.
import torch
from torch import nn


class Adapted(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        self.down = nn.Linear(4096, rank, bias=False, dtype=torch.float64, device=layer.weight.device)
        self.up = nn.Linear(rank, 1024, bias=False, dtype=torch.float64, device=layer.weight.device)
        nn.init.zeros_(self.up.weight)

    def forward(self, h):
        return self.layer(h) + self.up(self.down(h))


def train(model, loader, loss_fn, make_optimizer, rank):
    for p in model.parameters():
        p.requires_grad = False
    model[2] = Adapted(model[2], rank)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
