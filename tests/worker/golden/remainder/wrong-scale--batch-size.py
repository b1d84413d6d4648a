def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        model.zero_grad()
        for x, y in batches[start : start + accum_steps]:
            (loss_fn(model(x), y) / len(y)).backward()
        optimizer.step()
