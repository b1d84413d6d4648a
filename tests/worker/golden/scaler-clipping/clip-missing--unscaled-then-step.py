# unscale_ is there (as if to clip), the clip itself was forgotten.
def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        for x, y in batches[start : start + accum_steps]:
            scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
