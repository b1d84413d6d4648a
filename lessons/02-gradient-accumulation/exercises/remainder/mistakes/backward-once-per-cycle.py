def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    losses = []
    for step, (x, y) in enumerate(loader):
        losses.append(loss_fn(model(x), y))
        if (step + 1) % accum_steps == 0 or step + 1 == total:
            optimizer.zero_grad()
            (sum(losses) / len(losses)).backward()
            optimizer.step()
            losses = []
