from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        for block in model.blocks:
            x = recompute(block, x, use_reentrant=False) if checkpoint else block(x)
        loss = loss_fn(model.head(x), y) / accum_steps
        loss.backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
