def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    for step, (x, y) in enumerate(loader):
        cycle = min(accum_steps, total - (step - step % accum_steps))
        loss = loss_fn(model(x), y) / cycle
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
