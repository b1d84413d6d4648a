# right: the loop, then the mean token loss over the whole loader, computed with gradients on
# (no torch.no_grad()): eight forwards no backward reaches (red team 8: refused as "backward once
# per cycle", the grader's meter keeping their graphs alive)
def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]
        tokens = sum(int((y != -100).sum()) for _, y in cycle)
        optimizer.zero_grad()
        for x, y in cycle:
            (loss_fn(model(x), y).sum() / tokens).backward()
        optimizer.step()
    total, tokens = 0.0, 0
    for x, y in loader:
        total += float(loss_fn(model(x), y).sum())
        tokens += int((y != -100).sum())
    print(f"mean token loss after training: {total / tokens:.4f}")
