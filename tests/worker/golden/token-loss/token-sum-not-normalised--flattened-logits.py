def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader, start=1):
        logits = model(x)
        per_token = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        (per_token.sum() / accum_steps).backward()
        if step % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
