"""Clipping each micro-batch's gradient is not clipping the accumulated gradient once."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1).double()
x = torch.randn(8, 4, dtype=torch.float64) * 3
y = torch.randn(8, 1, dtype=torch.float64)
loss_fn = nn.MSELoss()
max_norm = 0.5


def cycle(clip_each: bool) -> list[torch.Tensor]:
    model.zero_grad()
    for xb, yb in zip(x.chunk(4), y.chunk(4), strict=True):
        (loss_fn(model(xb), yb) / 4).backward()
        if clip_each:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if not clip_each:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return [p.grad.clone() for p in model.parameters()]


once, each = cycle(False), cycle(True)
norm = torch.cat([g.flatten() for g in once]).norm()
assert torch.isclose(norm, torch.tensor(max_norm, dtype=torch.float64))  # the large batch, clipped
assert not all(torch.allclose(a, b) for a, b in zip(once, each, strict=True))
