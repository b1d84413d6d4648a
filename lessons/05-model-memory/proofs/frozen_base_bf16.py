"""A frozen base kept in bfloat16: 2 bytes per weight instead of 4, no gradient, and the float32
adapter beside it still trains (its gradient flows through the 16-bit base's output)."""

import torch
from torch import nn

torch.manual_seed(0)
full = nn.Linear(256, 256)
base = nn.Linear(256, 256).to(torch.bfloat16).requires_grad_(False)
assert base.weight.element_size() == 2 and full.weight.element_size() == 4
assert base.weight.numel() * 2 == full.weight.numel() * full.weight.element_size() // 2

A = nn.Parameter(torch.empty(256, 4).uniform_(-1 / 16, 1 / 16))
B = nn.Parameter(torch.randn(4, 256) * 0.01)
x = torch.randn(8, 256)
out = base(x.to(torch.bfloat16)).float() + x @ A @ B
out.pow(2).mean().backward()
assert base.weight.grad is None and base.bias.grad is None
assert A.grad is not None and torch.count_nonzero(A.grad) > 0 and B.grad.dtype == torch.float32
