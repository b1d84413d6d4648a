# A Lightning-like loop body: the configuration chosen once, a ConstantLR (factor 1) stepped
# per update.
import contextlib

import torch
from torch.optim.lr_scheduler import ConstantLR
from torch.utils.checkpoint import checkpoint as ckpt


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    scheduler = ConstantLR(optimizer, factor=1.0, total_iters=0)
    for i, (x, y) in enumerate(loader):
        if precision == torch.float32:
            ctx = contextlib.nullcontext()
        else:
            ctx = torch.autocast(device_type=x.device.type, dtype=precision)
        with ctx:
            h = x
            for block in model.blocks:
                h = ckpt(block, h, use_reentrant=False) if checkpoint else block(h)
            loss = loss_fn(model.head(h), y)
        (loss / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
