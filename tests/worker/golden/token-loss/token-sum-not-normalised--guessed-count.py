def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        if i % accum_steps == 0:
            # the cycle's count, guessed from its first micro-batch
            n_tokens = int((y != -100).sum()) * accum_steps
        loss = loss_fn(model(x), y).sum() / n_tokens
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
