"""backward() adds into .grad instead of replacing it."""

import torch

w = torch.tensor(1.0, requires_grad=True)
(2 * w).backward()
assert w.grad.item() == 2.0
(2 * w).backward()
assert w.grad.item() == 4.0
