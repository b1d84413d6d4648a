# The averaging done by hooks on the parameters instead of on the loss.
def train(model, loader, loss_fn, optimizer, accum_steps):
    for p in model.parameters():
        p.register_hook(lambda grad: grad / accum_steps)
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
