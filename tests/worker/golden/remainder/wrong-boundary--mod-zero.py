def train(model, loader, loss_fn, optimizer, accum_steps):
    n = len(loader)
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if i % accum_steps == 0 or i == n - 1:
            optimizer.step()
            optimizer.zero_grad()
