def train(model, loader, loss_fn, optimizer, accum_steps):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        optimizer.step()
