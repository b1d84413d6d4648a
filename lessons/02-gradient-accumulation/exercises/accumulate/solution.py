def train(model, loader, loss_fn, optimizer, accum_steps):
    """One pass over `loader`; one optimizer update per `accum_steps` micro-batches."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps  # backward adds: make the sum a mean
        loss.backward()
        if (step + 1) % accum_steps == 0:  # the cycle is complete
            optimizer.step()
            optimizer.zero_grad()
