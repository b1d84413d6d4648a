def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    total = 0
    for step, (x, y) in enumerate(loader):
        total = total + loss_fn(model(x), y) / accum_steps
        if (step + 1) % accum_steps == 0:
            total.backward()
            optimizer.step()
            optimizer.zero_grad()
            total = 0
