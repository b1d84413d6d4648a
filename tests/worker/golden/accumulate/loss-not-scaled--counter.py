def train(model, loader, loss_fn, optimizer, accum_steps):
    count = 0
    for x, y in loader:
        if count % accum_steps == 0:
            model.zero_grad()
        loss_fn(model(x), y).backward()
        count += 1
        if count % accum_steps == 0:
            optimizer.step()
