import torch.utils.checkpoint as ckpt


class Pair:
    def __init__(self, blocks):
        self.blocks = blocks

    def __call__(self, t):
        for block in self.blocks:
            t = block(t)
        return t


def train_step(model, x, y, loss_fn, optimizer):
    act = x[:, :]
    for start in range(0, len(model.blocks), 2):
        act = ckpt.checkpoint(Pair(model.blocks[start : start + 2]), act, use_reentrant=False)
    logits = model.head(act)
    loss_fn(logits, y).backward()
    optimizer.step()
    for p in model.parameters():
        p.grad = None
