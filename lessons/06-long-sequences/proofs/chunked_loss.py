"""Cross-entropy computed in chunks of the hidden states, each under checkpoint, summed and divided
once by the real tokens, gives the whole loss's value and gradients; no tokens x vocabulary tensor is
saved for backward, and the peak resident memory the kernel measured for the process (VmHWM) is lower
than the whole loss's by more than twice the logits' bytes (the whole loss holds about three tensors that size
in backward: the log-softmax, its gradient and the logits' gradient)."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def whole_loss(hidden, labels, lm_head):
    return F.cross_entropy(lm_head(hidden), labels, ignore_index=-100)


def chunked_loss(hidden, labels, lm_head, rows=256):
    def chunk_loss(h, y):
        return F.cross_entropy(lm_head(h), y, reduction="sum", ignore_index=-100)

    total = sum(
        checkpoint(chunk_loss, hc, yc, use_reentrant=False)
        for hc, yc in zip(hidden.split(rows), labels.split(rows), strict=True)
    )
    return total / (labels != -100).sum()


def setup(n, d, v):
    torch.manual_seed(0)
    lm_head = torch.nn.Linear(d, v, bias=False)
    hidden = torch.randn(n, d, requires_grad=True)
    labels = torch.randint(0, v, (n,))
    labels[-n // 3 :] = -100  # the last chunks are partly, then wholly, padding
    return hidden, labels, lm_head


def peak_kib(how: str, n: int, d: int, v: int) -> int:
    """One step of one loss in a fresh process: its peak resident memory, as the kernel counted it.
    VmHWM, not ru_maxrss: the latter keeps the parent's high-water mark across fork and exec."""
    hidden, labels, lm_head = setup(n, d, v)
    (whole_loss if how == "whole" else chunked_loss)(hidden, labels, lm_head).backward()
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "--peak":
    print(peak_kib(sys.argv[2], *map(int, sys.argv[3:])))
    sys.exit()

# the same loss and gradients
n, d, v = 1000, 32, 500
results = []
for loss_fn in (whole_loss, chunked_loss):
    hidden, labels, lm_head = setup(n, d, v)
    saved: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor, saved: list[tuple[int, ...]] = saved) -> torch.Tensor:
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(hidden, labels, lm_head)
    loss.backward()
    results.append((loss.detach(), hidden.grad, lm_head.weight.grad, saved))
(whole, h_whole, w_whole, saved_whole), (chunked, h_chunked, w_chunked, saved_chunked) = results
assert torch.allclose(whole, chunked, rtol=1e-6)
assert torch.allclose(h_whole, h_chunked, atol=1e-7) and torch.allclose(w_whole, w_chunked, atol=1e-7)
assert (n, v) in saved_whole
assert not any(len(s) == 2 and s[-1] == v for s in saved_chunked), (
    saved_chunked
)  # no logits kept across chunks

# the peak, measured by the kernel in a fresh process per loss: 128 MiB of float32 logits. glibc
# raises its mmap threshold after freeing a large block, and then keeps freed chunks resident; a
# fixed threshold hands each freed block back, so the resident peak follows the live tensors
size = ["4096", "64", "8192"]
env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
peaks = {
    how: int(
        subprocess.run(
            [sys.executable, __file__, "--peak", how, *size],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
    )
    for how in ("whole", "chunked")
}
logits_kib = 4096 * 8192 * 4 // 1024
assert peaks["whole"] - peaks["chunked"] > 2 * logits_kib, (peaks, logits_kib)
