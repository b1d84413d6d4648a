import itertools


def train(model, loader, loss_fn, optimizer, accum_steps):
    it = iter(loader)
    while cycle := list(itertools.islice(it, accum_steps)):
        positions = sum(y.numel() for _, y in cycle)
        optimizer.zero_grad()
        for x, y in cycle:
            (loss_fn(model(x), y).sum() / positions).backward()
        optimizer.step()
