# torch.compile: refused with a named limit (its compiler starts threads and processes).
import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    compiled = torch.compile(model)
    for i, (x, y) in enumerate(loader):
        (loss_fn(compiled(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
