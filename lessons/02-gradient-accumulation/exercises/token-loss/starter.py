def train(model, loader, loss_fn, optimizer, accum_steps):
    """One update per `accum_steps` micro-batches, normalised by the cycle's real tokens."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        token_losses = loss_fn(model(x), y)  # shaped like y, 0 where y == -100
        loss = token_losses.sum() / (y != -100).sum() / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
