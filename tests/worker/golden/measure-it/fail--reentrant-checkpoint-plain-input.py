# Reentrant checkpoint of a plain batch: no gradient reaches the blocks (not "checkpoint ignored").
import torch
from torch.utils.checkpoint import checkpoint as ckpt


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    for i, (x, y) in enumerate(loader):
        with torch.autocast(x.device.type, dtype=precision, enabled=precision != torch.float32):
            h = x
            for block in model.blocks:
                h = ckpt(block, h, use_reentrant=True) if checkpoint else block(h)
            loss = loss_fn(model.head(h), y)
        (loss / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
