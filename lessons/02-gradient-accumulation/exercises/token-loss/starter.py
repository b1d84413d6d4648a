def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        token_losses = loss_fn(model(x), y)
        loss = token_losses.sum() / (y != -100).sum() / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
