def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]
        n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
        total = sum(loss_fn(model(x), y).sum() for x, y in cycle)
        optimizer.zero_grad()
        (total / n_tokens).backward()
        optimizer.step()
