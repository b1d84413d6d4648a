# F4: at every batch the loop also logs the base model's loss, the adapter switched off, under
# torch.no_grad(), through the loss_fn it was handed.
import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        self.enabled = True
        self.A = nn.Parameter(torch.randn(layer.in_features, rank, dtype=torch.float64) * 0.01)
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, dtype=torch.float64))

    def forward(self, h):
        out = self.layer(h)
        return out + h @ self.A @ self.B if self.enabled else out


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = LoRA(model[2], rank)
    opt = make_optimizer([model[2].A, model[2].B])
    for x, y in loader:
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            model[2].enabled = False
            base = loss_fn(model(x), y)
            model[2].enabled = True
        print(f"loss {loss.item():.4f} (base {base.item():.4f})")
