# F4: the frozen model's loss over every batch before training (torch.no_grad()), then the
# adapter's after training, both through loss_fn.
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    batches = list(loader)
    with torch.no_grad():
        before = loss_fn(model(torch.cat([x for x, _ in batches])), torch.cat([y for _, y in batches]))
    A = nn.Parameter(torch.randn(4096, rank, dtype=torch.float64) / 64)
    B = nn.Parameter(torch.zeros(rank, 1024, dtype=torch.float64))
    layer = model[2]

    def forward(x):
        h = model[1](model[0](x))
        return layer(h) + (h @ A) @ B

    opt = make_optimizer([A, B])
    for x, y in batches:
        opt.zero_grad()
        loss_fn(forward(x), y).backward()
        opt.step()
    with torch.no_grad():
        base_after = loss_fn(layer(model[1](model[0](batches[0][0]))), batches[0][1])
        adapted = loss_fn(forward(batches[0][0]), batches[0][1])
    print(before.item(), base_after.item(), adapted.item())
