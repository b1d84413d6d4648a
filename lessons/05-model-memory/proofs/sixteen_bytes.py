"""Weights, gradients and Adam's two buffers: 16 bytes per float32 parameter after the first step."""

import torch
from torch import nn

model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
optimizer = torch.optim.Adam(model.parameters())
model(torch.randn(4, 64)).sum().backward()
optimizer.step()
n = sum(p.numel() for p in model.parameters())
weights = sum(p.numel() * p.element_size() for p in model.parameters())
grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
state = sum(
    t.numel() * t.element_size()
    for s in optimizer.state.values()
    for k, t in s.items()
    if k in ("exp_avg", "exp_avg_sq")
)
assert weights == grads == 4 * n
assert state == 8 * n
assert weights + grads + state == 16 * n
