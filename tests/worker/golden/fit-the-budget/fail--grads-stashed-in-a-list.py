# Every .grad is None when the step returns (the program's own check sees none kept), but each
# step's gradients live on in a list of the program's: their memory is never released.
from torch.utils.checkpoint import checkpoint

stash = []


def train_step(model, x, y, loss_fn, optimizer):
    h = x
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=False)
    loss_fn(model.head(h), y).backward()
    optimizer.step()
    stash.append([p.grad for p in model.parameters()])
    optimizer.zero_grad(set_to_none=True)
