"""A scheduler stepped on every micro-batch ends a warm-up of 1000 updates after 250 when
accum_steps = 4."""

import torch

param = torch.nn.Parameter(torch.zeros(1))
optimizer = torch.optim.SGD([param], lr=1.0)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: min(1.0, n / 1000))
accum_steps, updates = 4, 0
for step in range(4000):
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        updates += 1
    scheduler.step()  # wrong place: once per micro-batch
    if optimizer.param_groups[0]["lr"] == 1.0:
        break
assert updates == 250, updates
