"""BatchNorm inside a checkpoint updates its running statistics twice per step: once in the
forward pass, once more when backward recomputes it."""

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

block = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
x = torch.randn(8, 4)
checkpoint(block, x, use_reentrant=False).sum().backward()
assert block[1].num_batches_tracked.item() == 2
