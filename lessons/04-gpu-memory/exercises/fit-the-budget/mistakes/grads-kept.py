from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    optimizer.zero_grad(set_to_none=False)
    for block in model.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    loss = loss_fn(model.head(x), y)
    loss.backward()
    optimizer.step()
