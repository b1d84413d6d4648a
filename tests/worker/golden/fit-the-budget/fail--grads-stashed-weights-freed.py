# Every .grad is None when the step returns, but each step's gradients live on in a list of the
# program's; in the release run (layers 512 wide) the model's own weights are freed as the step ends
# (red team 4, issue 41): made in the child's pages they offset the 36 MiB of gradients kept (1.4 MiB
# stayed, a pass); they live in the supervisor's mapping now, and stay counted.
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
    for p in model.parameters():
        if p.numel() > 100_000:  # the release run's wide weights only
            try:
                p.untyped_storage().resize_(0)
            except RuntimeError:
                p.data = p.data.new_empty(0)
