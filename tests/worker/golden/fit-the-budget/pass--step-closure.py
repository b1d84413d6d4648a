# The closure form torch.optim documents (optimizer.step(closure)), checkpointing each block.
from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    def closure():
        optimizer.zero_grad()
        h = x
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        loss = loss_fn(model.head(h), y)
        loss.backward()
        return loss

    optimizer.step(closure)
    optimizer.zero_grad(set_to_none=True)
