"""Four micro-batches with their mean losses divided by accum_steps add up to the large batch's
gradient; undivided, the sum is accum_steps times too large."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()
loss_fn = nn.CrossEntropyLoss()
x = torch.randn(20, 6, dtype=torch.float64)
y = torch.randint(0, 3, (20,))
accum_steps = 4


def grads():
    return [p.grad.clone() for p in model.parameters()]


loss_fn(model(x), y).backward()
large = grads()
model.zero_grad()
for xb, yb in zip(x.chunk(accum_steps), y.chunk(accum_steps), strict=True):
    (loss_fn(model(xb), yb) / accum_steps).backward()
assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-14) for a, b in zip(grads(), large, strict=True))
model.zero_grad()
for xb, yb in zip(x.chunk(accum_steps), y.chunk(accum_steps), strict=True):
    loss_fn(model(xb), yb).backward()
assert all(torch.allclose(a, accum_steps * b) for a, b in zip(grads(), large, strict=True))
