def train(model, loader, loss_fn, optimizer, accum_steps):
    """The solution, with the loss called by its keywords (nn.CrossEntropyLoss(input=, target=))."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(input=model(x), target=y) / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
