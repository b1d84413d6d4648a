def train(model, loader, loss_fn, optimizer, accum_steps):
    """WRONG: the short last cycle's losses are divided by how many micro-batches it LACKS
    (accum_steps - remainder), not by how many it holds (red team 5, F3). On 14 micro-batches in
    cycles of 4 the last cycle held 2 and lacked 2, and this passed; on 15 it holds 3, lacks 1."""
    total = len(loader)
    full = total - total % accum_steps  # micro-batches in full cycles
    lacking = accum_steps - total % accum_steps
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        divisor = accum_steps if step < full else lacking
        (loss_fn(model(x), y) / divisor).backward()
        if (step + 1) % accum_steps == 0 or step + 1 == total:
            optimizer.step()
            optimizer.zero_grad()
