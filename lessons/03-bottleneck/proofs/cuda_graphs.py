"""torch.compile(mode="reduce-overhead") runs a training step's forward and backward as two CUDA
graphs: once recorded, each is replayed with one cudaGraphLaunch (two per step), while the
optimizer step, left uncompiled, still launches its own kernels."""

import torch
from torch.profiler import ProfilerActivity, profile

net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]).cuda()
x = torch.randn(16, 64, device="cuda")
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
compiled = torch.compile(net, mode="reduce-overhead")


def step():
    compiled(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


try:
    for _ in range(4):  # compile, warm up, record both graphs
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()  # replayed
        torch.cuda.synchronize()
finally:
    torch._dynamo.reset()
names = [event.name for event in prof.events()]
assert sum("cudaGraphLaunch" in name for name in names) == 2, sorted(set(names))[:40]
assert any("cudaLaunchKernel" in name for name in names)  # the optimizer's own launches
