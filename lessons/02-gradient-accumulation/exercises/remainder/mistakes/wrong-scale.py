def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / total  # the number of micro-batches in the whole loader
        loss.backward()
        if (step + 1) % accum_steps == 0 or step + 1 == total:
            optimizer.step()
            optimizer.zero_grad()
