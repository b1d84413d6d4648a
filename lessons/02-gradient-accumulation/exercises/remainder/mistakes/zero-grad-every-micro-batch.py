def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        cycle = min(accum_steps, total - (step - step % accum_steps))
        loss = loss_fn(model(x), y) / cycle
        loss.backward()
        if (step + 1) % accum_steps == 0 or step + 1 == total:
            optimizer.step()
