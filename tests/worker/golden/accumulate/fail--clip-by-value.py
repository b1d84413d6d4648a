def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            for p in model.parameters():
                p.grad.clamp_(-0.02, 0.02)  # "keep the updates stable"
            optimizer.step()
            optimizer.zero_grad()
