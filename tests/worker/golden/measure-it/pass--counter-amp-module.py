import torch
from torch.utils import checkpoint as ckpt


def run_model(model, x, checkpoint):
    if not checkpoint:
        return model(x)
    for block in model.blocks:
        x = ckpt.checkpoint(block, x, use_reentrant=False)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    use_amp = precision in (torch.bfloat16, torch.float16)
    seen = 0
    for x, y in loader:
        with torch.amp.autocast(device_type=x.device.type, dtype=precision, enabled=use_amp):
            out = run_model(model, x, checkpoint)
            loss = loss_fn(out, y) / accum_steps
        loss.backward()
        seen += 1
        if seen == accum_steps:
            optimizer.step()
            optimizer.zero_grad()
            seen = 0
