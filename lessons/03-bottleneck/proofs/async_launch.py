"""CUDA calls return before the GPU is done: an unsynchronised clock times the launch, and a
blocking copy to the GPU (non_blocking=False), from pinned memory or not, waits for the queue."""

import time

import torch

a = torch.randn(8192, 8192, device="cuda")
a @ a
torch.cuda.synchronize()


def queued_matmuls(n=20):
    for _ in range(n):
        a @ a


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


start = time.perf_counter()
queued_matmuls()
launched = time.perf_counter() - start
torch.cuda.synchronize()
done = time.perf_counter() - start
assert launched < done / 5, (launched, done)  # the clock without a sync saw only the launch

for host in (torch.ones(1024), torch.ones(1024).pin_memory()):
    # a blocking copy behind 20 queued matmuls takes as long as they do
    took = timed(lambda host=host: (queued_matmuls(), host.to("cuda")))
    assert took > done / 2, (host.is_pinned(), took, done)
