# torch.func.grad over the adapter's two matrices (this kind meters no saved tensors: the
# transforms run); the optimizer steps on the .grad it sets.
import torch
from torch import nn
from torch.func import functional_call, grad


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        kw = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        self.A = nn.Parameter(torch.randn(layer.in_features, rank, **kw) / rank)
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **kw))

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = LoRA(model[2], rank)
    adapter = {"2.A": model[2].A, "2.B": model[2].B}
    opt = make_optimizer(list(adapter.values()))
    for x, y in loader:
        g = grad(lambda p, x=x, y=y: loss_fn(functional_call(model, p, (x,)), y))(
            {k: v.detach() for k, v in adapter.items()}
        )
        for k, p in adapter.items():
            p.grad = g[k]
        opt.step()
        opt.zero_grad()
