# The adapter via parametrize-free wrapping; StepLR (flat) and optimizer.step(closure).
import torch
from torch import nn
from torch.optim.lr_scheduler import StepLR


class WithLoRA(nn.Module):
    def __init__(self, base, rank):
        super().__init__()
        self.base = base
        kw = dict(dtype=base.weight.dtype, device=base.weight.device)
        self.lora_a = nn.Parameter(torch.randn(base.in_features, rank, **kw) * 0.01)
        self.lora_b = nn.Parameter(torch.zeros(rank, base.out_features, **kw))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a) @ self.lora_b


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = WithLoRA(model[2], rank)
    opt = make_optimizer([model[2].lora_a, model[2].lora_b])
    sched = StepLR(opt, step_size=1000, gamma=0.5)
    for x, y in loader:

        def closure(x=x, y=y):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)
        sched.step()
