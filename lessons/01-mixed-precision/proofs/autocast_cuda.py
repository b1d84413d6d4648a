"""On CUDA, autocast runs linear and matmul in float16 and keeps softmax, log_softmax, sum, exp,
log and cross_entropy in float32, while the parameters stay float32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(64, 10).cuda()
x = torch.randn(32, 64, device="cuda")
y = torch.randint(0, 10, (32,), device="cuda")
with torch.autocast("cuda", dtype=torch.float16):
    logits = model(x)
    assert logits.dtype == torch.float16
    assert (x @ x.T).dtype == torch.float16
    for op in (torch.softmax, torch.log_softmax):
        assert op(logits, -1).dtype == torch.float32, op
    for op in (torch.sum, torch.exp, torch.log):
        assert op(logits.abs() + 1).dtype == torch.float32, op
    assert F.cross_entropy(logits, y).dtype == torch.float32
assert model.weight.dtype == torch.float32
