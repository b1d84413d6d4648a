def train(model, loader, loss_fn, optimizer, accum_steps):
    """One pass over `loader`; one optimizer update per `accum_steps` micro-batches."""
    # This loop updates on every micro-batch. Make it accumulate.
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
