def train(model, loader, loss_fn, make_optimizer, rank):
    optimizer = make_optimizer(model.parameters())  # full fine-tuning: every weight trains
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
