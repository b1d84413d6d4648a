# nanoGPT/HF style: a linear schedule (flat here) stepped after every update; the cycle's real
# tokens counted before its backward passes.
import torch
from torch.optim.lr_scheduler import LinearLR


def train(model, loader, loss_fn, optimizer, accum_steps):
    schedule = LinearLR(optimizer, start_factor=1.0, end_factor=1.0, total_iters=100)
    pending = []
    for x, y in loader:
        pending.append((x, y))
        if len(pending) < accum_steps:
            continue
        tokens = torch.stack([(t != -100).sum() for _, t in pending]).sum()
        for inp, tgt in pending:
            (loss_fn(model(inp), tgt).sum() / tokens).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        pending = []
