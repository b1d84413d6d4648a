def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    """Accumulates with the GradScaler, but never clips."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
