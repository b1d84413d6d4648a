def train(model, loader, loss_fn, optimizer, accum_steps):
    n = 0
    model.zero_grad()
    for x, y in loader:
        loss = loss_fn(model(x), y) * (1 / len(loader))
        loss.backward()
        n += 1
        if n % accum_steps == 0:
            optimizer.step()
            model.zero_grad()
