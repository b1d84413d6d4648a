from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    """One training step in at most 65 % of the naive step's peak memory."""
    for block in model.blocks:
        # keep only the block's input; backward recomputes its insides, one block at a time
        x = checkpoint(block, x, use_reentrant=False)
    loss = loss_fn(model.head(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # the gradients' memory is free until the next backward
