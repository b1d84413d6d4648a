def train(model, loader, loss_fn, optimizer, accum_steps):
    for step, (x, y) in enumerate(loader):
        if step % accum_steps == 0:
            optimizer.zero_grad()
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        optimizer.step()
