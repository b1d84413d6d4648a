def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        model.zero_grad()
        for x, y in batches[start : start + accum_steps]:
            loss = loss_fn(model(x), y) * (1 / accum_steps)
            loss.backward()
        optimizer.step()
