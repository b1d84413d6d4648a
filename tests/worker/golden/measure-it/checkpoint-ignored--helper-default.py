import torch
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, recompute_blocks=False):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if recompute_blocks else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    low = precision != torch.float32
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=low):
            loss = loss_fn(forward(model, x), y) / accum_steps
        loss.backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
