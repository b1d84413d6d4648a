def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    """Accumulate with a GradScaler; clip once per update."""
    # Missing: clipping with torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).
    # Where does it go, and what must happen to the gradients first?
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
