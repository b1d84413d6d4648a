def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        for x, y in batches[start : start + accum_steps]:
            model.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y) * (1.0 / accum_steps)
            loss.backward()
        optimizer.step()
