"""The hook step's fallback for accumulation: no step before a cycle's last micro-batch, so the
gradients are kept until then, and before that last backward every parameter holds one: the
memory the hook step saves is spent again. (Clipping each parameter by its own norm, the other
fallback, is another update than the global clip: clip_once.py of lesson 2 shows a clip changes
the direction as soon as the norms it sees differ.)"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)).double()
params = list(model.parameters())
optimizers = {p: torch.optim.Adam([p], lr=0.01) for p in params}
accum_steps, state = 3, {"last": False}
alive_at_step = []


def step_if_last(p):
    if state["last"]:
        alive_at_step.append(sum(q.grad is not None for q in params))
        optimizers[p].step()
        p.grad = None


for p in params:
    p.register_post_accumulate_grad_hook(step_if_last)
loss_fn = nn.CrossEntropyLoss()
for i in range(accum_steps):
    state["last"] = i == accum_steps - 1
    x, y = torch.randn(4, 5, dtype=torch.float64), torch.randint(0, 2, (4,))
    if state["last"]:
        assert all(p.grad is not None for p in params)  # all alive before the last backward
    (loss_fn(model(x), y) / accum_steps).backward()
assert max(alive_at_step) == len(params)  # the first hook of the last backward sees them all
assert all(p.grad is None for p in params)
