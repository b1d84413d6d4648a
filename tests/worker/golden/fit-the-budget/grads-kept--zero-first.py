from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    optimizer.zero_grad()  # cleared before the step, so they live on after it
    for block in model.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    loss_fn(model.head(x), y).backward()
    optimizer.step()
