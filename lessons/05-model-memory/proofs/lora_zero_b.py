"""LoRA with B = 0: the output is the base layer's at step 0, A's gradient is zero, B's is not."""

import torch
from torch import nn

torch.manual_seed(0)
base = nn.Linear(16, 8).requires_grad_(False)
r = 2
A = nn.Parameter(torch.randn(16, r) / r)
B = nn.Parameter(torch.zeros(r, 8))
x = torch.randn(5, 16)
out = base(x) + x @ A @ B
assert torch.equal(out, base(x))
out.pow(2).sum().backward()
assert torch.count_nonzero(A.grad) == 0
assert torch.count_nonzero(B.grad) > 0
assert base.weight.grad is None
