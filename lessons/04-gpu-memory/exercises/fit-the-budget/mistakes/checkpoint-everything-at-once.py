from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    loss = loss_fn(checkpoint(model, x, use_reentrant=False), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
