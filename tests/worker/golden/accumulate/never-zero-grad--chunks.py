import itertools


def train(model, loader, loss_fn, optimizer, accum_steps):
    it = iter(loader)
    for _ in range(len(loader) // accum_steps):
        for x, y in itertools.islice(it, accum_steps):
            (loss_fn(model(x), y) / accum_steps).backward()
        optimizer.step()
