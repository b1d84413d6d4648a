"""LoRA as the card builds it: A as nn.Linear inits its weight (the bound kaiming_uniform_(a=√5)
gives, which the authors' code and PEFT call), B = 0, the path scaled by alpha / r. For a
4096-wide layer x @ A is about as large as the base layer's output (std ≈ 0.58 each, where
randn(d_in, r) / r gives ≈ 8); at step 0 the output is the base layer's, A's gradient is zero and
B's is not."""

import math

import torch
from torch import nn

torch.manual_seed(0)
d, r, alpha = 4096, 8, 16
base = nn.Linear(d, d).requires_grad_(False)
x = torch.randn(64, d)

bound = 1 / math.sqrt(d)
A = nn.Parameter(torch.empty(d, r).uniform_(-bound, bound))
B = nn.Parameter(torch.zeros(r, d))
peft_a = torch.empty(r, d)  # PEFT's lora_A is an nn.Linear(d_in, r): weight r × d_in
nn.init.kaiming_uniform_(peft_a, a=math.sqrt(5))
assert abs(peft_a.abs().max().item() - bound) < 1e-3 * bound  # the same bound, 1/√d_in

with torch.no_grad():
    base_std = base(x).std().item()
    lora_std = (x @ A).std().item()
    old_std = (x @ (torch.randn(d, r) / r)).std().item()
assert 0.5 < base_std < 0.65 and 0.5 < lora_std < 0.65, (base_std, lora_std)
assert 7.5 < old_std < 8.7, old_std  # the course's former init: 14× the layer's own output

out = base(x) + (x @ A @ B) * (alpha / r)
assert torch.equal(out, base(x))
out.pow(2).sum().backward()
assert torch.count_nonzero(A.grad) == 0
assert torch.count_nonzero(B.grad) > 0
assert base.weight.grad is None
