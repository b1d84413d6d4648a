"""GradScaler starts at 65536; a step whose gradients hold an inf is skipped and halves the scale;
after growth_interval clean steps (2000 by default) the scale doubles."""

import torch
import torch.nn as nn

scaler = torch.amp.GradScaler("cpu")
assert scaler.get_scale() == 65536.0
assert scaler.get_growth_interval() == 2000

model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)

x = torch.ones(2, 3)
x[0, 0] = float("inf")  # an inf that reaches the gradients
before = model.weight.detach().clone()
scaler.scale(model(x).sum()).backward()
scaler.step(optimizer)
scaler.update()
assert torch.equal(model.weight, before)  # the step was skipped
assert scaler.get_scale() == 512.0  # and the scale halved

optimizer.zero_grad()
scaler.scale(model(torch.ones(2, 3)).sum()).backward()
scaler.step(optimizer)
scaler.update()
assert not torch.equal(model.weight, before)  # a clean step updates
assert scaler.get_scale() == 1024.0  # and, after growth_interval clean steps, doubles
