def train(model, loader, loss_fn, optimizer, accum_steps):
    n = len(loader)
    i = 0
    for x, y in loader:
        model.zero_grad()
        size = min(accum_steps, n - i // accum_steps * accum_steps)
        (loss_fn(model(x), y) / size).backward()
        i += 1
        if i % accum_steps == 0 or i == n:
            optimizer.step()
