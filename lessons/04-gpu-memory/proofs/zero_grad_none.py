"""zero_grad() sets every .grad to None by default; under inference_mode nothing is kept for
backward."""

import torch
import torch.nn as nn

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(3, 4)).sum().backward()
optimizer.step()
optimizer.zero_grad()
assert all(p.grad is None for p in model.parameters())

with torch.inference_mode():
    out = model(torch.randn(3, 4))
assert not out.requires_grad and out.grad_fn is None
