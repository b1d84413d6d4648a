def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for x, y in cycle:
            (loss_fn(model(x), y) / len(cycle)).backward()
        optimizer.step()
