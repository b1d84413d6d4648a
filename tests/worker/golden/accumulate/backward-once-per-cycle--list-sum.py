def train(model, loader, loss_fn, optimizer, accum_steps):
    losses = []
    for x, y in loader:
        losses.append(loss_fn(model(x), y))
        if len(losses) == accum_steps:
            optimizer.zero_grad()
            (sum(losses) / accum_steps).backward()
            optimizer.step()
            losses = []
