"""A frozen parameter gets no .grad and no optimizer state; freezing after a backward leaves the
.grad that was already there."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
model[0].requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters())  # all parameters, frozen ones included
model(torch.randn(3, 4)).sum().backward()
optimizer.step()
assert model[0].weight.grad is None and model[0].bias.grad is None
assert len(optimizer.state[model[0].weight]) == 0
assert set(optimizer.state[model[2].weight]) == {"step", "exp_avg", "exp_avg_sq"}

late = nn.Linear(4, 2)
late(torch.randn(3, 4)).sum().backward()
late.requires_grad_(False)
assert late.weight.grad is not None  # freezing does not clear it
