def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        per_token = loss_fn(model(x), y)
        lengths = (y != -100).sum(dim=1).clamp(min=1)
        per_sequence = per_token.sum(dim=1) / lengths  # every sequence weighs the same
        (per_sequence.mean() / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
