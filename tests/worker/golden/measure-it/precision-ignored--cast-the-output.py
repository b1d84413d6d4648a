from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    for i, (x, y) in enumerate(loader):
        if checkpoint:
            h = x
            for block in model.blocks:
                h = recompute(block, h, use_reentrant=False)
            out = model.head(h)
        else:
            out = model(x)
        loss = loss_fn(out.to(precision), y)
        (loss / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
