"""AdamW's default foreach step on CUDA holds temporaries of about one copy of the parameters at its
peak; fused=True keeps the same state with a lower peak."""

import torch
import torch.nn as nn


def step_peak(**kwargs) -> tuple[int, list[str]]:
    torch.manual_seed(0)
    model = nn.Linear(4096, 4096, bias=False).cuda()  # 64 MiB of float32 weights
    optimizer = torch.optim.AdamW(model.parameters(), **kwargs)
    model(torch.randn(8, 4096, device="cuda")).sum().backward()
    optimizer.step()  # the state exists from here on
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    optimizer.step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, list(optimizer.state[model.weight])


weights = 4096 * 4096 * 4
foreach_peak, foreach_state = step_peak(foreach=True)
fused_peak, fused_state = step_peak(fused=True)
assert foreach_state == fused_state
assert foreach_peak >= 0.5 * weights, foreach_peak
assert fused_peak < foreach_peak / 2, (fused_peak, foreach_peak)
