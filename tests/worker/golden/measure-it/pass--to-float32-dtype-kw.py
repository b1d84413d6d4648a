# model.to(dtype=torch.float32) and inputs .float(): float32 master weights, autocast below.
import torch
from torch.utils.checkpoint import checkpoint as ckpt


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    model.to(dtype=torch.float32)
    use_amp = precision in (torch.bfloat16, torch.float16)
    for i, (x, y) in enumerate(loader):
        x = x.float()
        with torch.autocast(device_type=x.device.type, dtype=precision, enabled=use_amp):
            h = x
            for block in model.blocks:
                h = ckpt(block, h, use_reentrant=False) if checkpoint else block(h)
            loss = loss_fn(model.head(h), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
