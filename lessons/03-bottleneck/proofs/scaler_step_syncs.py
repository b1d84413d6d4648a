"""scaler.step(optimizer) reads the inf check with .item(): on a GPU that is a synchronisation; with a
fused=True optimizer it hands the check to the optimizer's kernel and reads nothing back."""

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode


class Items(TorchDispatchMode):
    count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:  # what .item() runs
            Items.count += 1
        return func(*args, **(kwargs or {}))


model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
scaler.scale(model(torch.ones(2, 3)).sum()).backward()
scaler.unscale_(optimizer)
with Items():
    scaler.step(optimizer)
assert Items.count >= 1

fused = nn.Linear(3, 1)
fused_optimizer = torch.optim.Adam(fused.parameters(), lr=0.1, fused=True)
scaler = torch.amp.GradScaler("cpu")
scaler.scale(fused(torch.ones(2, 3)).sum()).backward()
Items.count = 0
with Items():
    scaler.step(fused_optimizer)
assert Items.count == 0
