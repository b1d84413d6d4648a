# the model checkpointed inside each micro-batch: less saved, still one micro-batch at a time
from torch.utils.checkpoint import checkpoint


def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        out = checkpoint(model, x, use_reentrant=False)
        (loss_fn(out, y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
