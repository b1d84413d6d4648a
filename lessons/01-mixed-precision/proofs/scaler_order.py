"""The scaler's order matters: update() before step() makes step() unscale a second time and the
next unscale_() raise; optimizer.step() in place of scaler.step() leaves update() nothing to read."""

import torch
import torch.nn as nn


def setup():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, optimizer, scaler


x = torch.ones(2, 3)

# the right order: the update is the unscaled gradient
model, optimizer, scaler = setup()
w0 = model.weight.detach().clone()
scaler.scale(model(x).sum()).backward()
scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
right = (model.weight - w0).detach()

# update() before step(): the gradients are divided by the scale twice
model, optimizer, scaler = setup()
scaler.scale(model(x).sum()).backward()
scaler.unscale_(optimizer)
scaler.update()
scaler.step(optimizer)
wrong = (model.weight - w0).detach()
assert torch.allclose(wrong * 1024.0, right)
optimizer.zero_grad()
scaler.scale(model(x).sum()).backward()
try:
    scaler.unscale_(optimizer)  # a step with no update after it
except RuntimeError:
    pass
else:
    raise AssertionError("unscale_ after a step without update() did not raise")

# optimizer.step() instead of scaler.step(): update() finds no inf check
model, optimizer, scaler = setup()
scaler.scale(model(x).sum()).backward()
optimizer.step()
try:
    scaler.update()
except AssertionError as e:
    assert "No inf checks were recorded" in str(e), e
else:
    raise AssertionError("update() after optimizer.step() did not fail")
