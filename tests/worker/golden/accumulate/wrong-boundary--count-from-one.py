def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader, start=1):
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
