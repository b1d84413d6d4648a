"""Selective checkpointing that saves the matrix products recomputes only the cheap op (the GELU) in
backward, where lesson 4's full checkpoint recomputes the product too; the gradients are the same
with either and without a checkpoint."""

from functools import partial

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

torch.manual_seed(0)
fc1, fc2 = torch.nn.Linear(32, 128), torch.nn.Linear(128, 32)


def block(x):
    return fc2(F.gelu(fc1(x)))


class Calls(TorchDispatchMode):
    """How many times each op runs."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


save = [torch.ops.aten.mm.default, torch.ops.aten.addmm.default]
policy = partial(create_selective_checkpoint_contexts, save)
runs = {
    "none": block,
    "full": partial(checkpoint, block, use_reentrant=False),
    "selective": partial(checkpoint, block, use_reentrant=False, context_fn=policy),
}
grads, in_backward = {}, {}
for name, run in runs.items():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    fc1.zero_grad()
    fc2.zero_grad()
    out = run(x)
    with Calls() as calls:
        out.pow(2).sum().backward()
    grads[name] = [x.grad, fc1.weight.grad, fc2.weight.grad]
    in_backward[name] = calls.counts

assert "addmm" not in in_backward["none"] and "gelu" not in in_backward["none"]
assert in_backward["full"].get("addmm") == 1 and in_backward["full"].get("gelu") == 1  # fc1 again
assert "addmm" not in in_backward["selective"] and in_backward["selective"].get("gelu") == 1
for name in ("full", "selective"):
    assert all(torch.equal(a, b) for a, b in zip(grads[name], grads["none"], strict=True)), name
