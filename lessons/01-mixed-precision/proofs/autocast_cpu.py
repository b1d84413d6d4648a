"""On the CPU, autocast defaults to bfloat16: linear goes to 16 bits, cross_entropy stays float32,
other ops keep their input's dtype, and the parameters stay float32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

assert torch.get_autocast_dtype("cpu") == torch.bfloat16
model = nn.Linear(64, 10)
x = torch.randn(32, 64)
y = torch.randint(0, 10, (32,))
with torch.autocast("cpu"):
    out = model(x)
    loss = F.cross_entropy(out, y)
    kept = torch.tanh(x)  # not on a list: the input's dtype
    mm = x @ x.T
assert out.dtype == torch.bfloat16
assert mm.dtype == torch.bfloat16
assert loss.dtype == torch.float32
assert kept.dtype == torch.float32
assert model.weight.dtype == torch.float32
loss.backward()
assert model.weight.grad is not None and model.weight.grad.dtype == torch.float32
