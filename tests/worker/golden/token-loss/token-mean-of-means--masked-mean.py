def train(model, loader, loss_fn, optimizer, accum_steps):
    model.zero_grad()
    for i, (x, y) in enumerate(loader):
        losses = loss_fn(model(x), y)
        loss = losses[y != -100].mean() / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            model.zero_grad()
