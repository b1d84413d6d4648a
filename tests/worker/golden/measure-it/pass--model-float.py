# float32 master weights made sure of with model.float(), autocast for the low precision.
import torch
from torch.utils.checkpoint import checkpoint as ckpt


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    model.float()  # float32 master weights, whatever precision autocast runs in
    for i, (x, y) in enumerate(loader):
        with torch.autocast(x.device.type, dtype=precision, enabled=precision is not torch.float32):
            out = x
            for block in model.blocks:
                out = ckpt(block, out, use_reentrant=False) if checkpoint else block(out)
            loss = loss_fn(model.head(out), y)
        (loss / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
