def train(model, loader, loss_fn, make_optimizer):
    optimizer = make_optimizer(model.parameters())
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
