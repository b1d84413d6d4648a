"""Adam creates its state at the first step: step, exp_avg and exp_avg_sq, each buffer the size of
the parameter; SGD with momentum keeps one buffer, plain SGD none."""

import torch
import torch.nn as nn

model = nn.Linear(1000, 1000)
optimizer = torch.optim.Adam(model.parameters())
assert len(optimizer.state) == 0  # nothing before the first step
model(torch.randn(8, 1000)).sum().backward()
optimizer.step()
state = optimizer.state[model.weight]
assert list(state) == ["step", "exp_avg", "exp_avg_sq"]
assert state["exp_avg"].shape == state["exp_avg_sq"].shape == model.weight.shape
n_params = sum(p.numel() for p in model.parameters())
buffers = sum(t.numel() for s in optimizer.state.values() for k, t in s.items() if k != "step")
assert buffers == 2 * n_params  # weights + gradients + state = 4 copies of the weights

sgd_model = nn.Linear(10, 10)
for momentum, keys in ((0.0, []), (0.9, ["momentum_buffer"])):
    sgd = torch.optim.SGD(sgd_model.parameters(), lr=0.1, momentum=momentum)
    sgd_model(torch.randn(2, 10)).sum().backward()
    sgd.step()
    assert [k for k, v in sgd.state[sgd_model.weight].items() if v is not None] == keys
