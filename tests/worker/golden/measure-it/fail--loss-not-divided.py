import torch
from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=precision != torch.float32):
            if checkpoint:
                for block in model.blocks:
                    x = recompute(block, x, use_reentrant=False)
                out = model.head(x)
            else:
                out = model(x)
            loss = loss_fn(out, y)
        loss.backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
