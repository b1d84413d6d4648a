def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader, 1):
        cycle = min(accum_steps, total - (step - 1) // accum_steps * accum_steps)
        loss = loss_fn(model(x), y) / cycle
        loss.backward()
        if (step + 1) % accum_steps == 0 or step == total:
            optimizer.step()
            optimizer.zero_grad()
