"""torch.compile(mode="reduce-overhead") runs the step as a CUDA graph: once it is recorded, a call
replays the whole graph with cudaGraphLaunch instead of launching each kernel from Python."""

import torch
from torch.profiler import ProfilerActivity, profile

net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]).cuda()
x = torch.randn(16, 64, device="cuda")
compiled = torch.compile(net, mode="reduce-overhead")
try:
    with torch.no_grad():
        for _ in range(3):  # compile, warm up, record the graph
            compiled(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            compiled(x)  # replayed
            torch.cuda.synchronize()
finally:
    torch._dynamo.reset()
names = {event.name for event in prof.events()}
assert any("cudaGraphLaunch" in name for name in names), sorted(names)[:40]
