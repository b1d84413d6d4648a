def train(model, loader, loss_fn, optimizer, accum_steps):
    it = iter(loader)
    for _ in range(len(loader) // accum_steps):  # whole cycles only
        optimizer.zero_grad()
        for _ in range(accum_steps):
            x, y = next(it)
            (loss_fn(model(x), y) / accum_steps).backward()
        optimizer.step()
