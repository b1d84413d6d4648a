def train(model, loader, loss_fn, optimizer, accum_steps):
    """The solution, with the per-token loss called by its keywords (logits=, targets=)."""
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]
        n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
        optimizer.zero_grad()
        for x, y in cycle:
            loss = loss_fn(model(x), targets=y).sum() / n_tokens
            loss.backward()
        optimizer.step()
