def train(model, loader, loss_fn, optimizer, accum_steps):
    """The call most language-model code makes: logits and targets flattened to one row per token."""
    batches = list(loader)
    for first in range(0, len(batches), accum_steps):
        cycle = batches[first : first + accum_steps]
        real = sum(int((y != -100).sum()) for _, y in cycle)
        for x, y in cycle:
            logits = model(x)
            per_token = loss_fn(logits.view(-1, logits.size(-1)), y.view(-1))
            (per_token.sum() / real).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
