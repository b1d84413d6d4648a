# ImageNet-example style: StepLR decays every 30 epochs and is stepped once per epoch, after
# the pass; the last short cycle is averaged over its own length.
import math

from torch.optim.lr_scheduler import StepLR


def train(model, loader, loss_fn, optimizer, accum_steps):
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    n = len(loader)
    cycles = math.ceil(n / accum_steps)
    for c in range(cycles):
        members = range(c * accum_steps, min((c + 1) * accum_steps, n))
        optimizer.zero_grad(set_to_none=True)
        for i in members:
            x, y = loader[i]
            (loss_fn(model(x), y) / len(members)).backward()
        optimizer.step()
    scheduler.step()
