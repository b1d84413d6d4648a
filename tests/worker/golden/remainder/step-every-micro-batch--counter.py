def train(model, loader, loss_fn, optimizer, accum_steps):
    i = 0
    for x, y in loader:
        if i % accum_steps == 0:
            model.zero_grad()
        (loss_fn(model(x), y) * (1 / accum_steps)).backward()
        optimizer.step()
        i += 1
