import torch
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, use_checkpoint):
    for i, block in enumerate(model.blocks):
        last = i == len(model.blocks) - 1
        x = recompute(block, x, use_reentrant=False) if use_checkpoint and not last else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=precision != torch.float32):
            loss = loss_fn(forward(model, x, checkpoint), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
