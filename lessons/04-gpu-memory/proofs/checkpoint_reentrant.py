"""Without use_reentrant, checkpoint warns and falls back to use_reentrant=True, which gives the
block's parameters no gradient when its input does not require one."""

import warnings

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

block, head = nn.Linear(4, 4), nn.Linear(4, 1)
x = torch.randn(2, 4)  # raw data: requires_grad is False
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    head(checkpoint(block, x)).sum().backward()
assert any("use_reentrant" in str(w.message) for w in caught)
assert block.weight.grad is None  # the reentrant default left the block out
head(checkpoint(block, x, use_reentrant=False)).sum().backward()
assert block.weight.grad is not None
