# counter instead of enumerate, model.zero_grad(), * (1 / k), zero after the step
def train(model, loader, loss_fn, optimizer, accum_steps):
    model.zero_grad()
    seen = 0
    for x, y in loader:
        out = model(x)
        loss = loss_fn(out, y) * (1 / accum_steps)
        loss.backward()
        seen += 1
        if seen == accum_steps:
            optimizer.step()
            model.zero_grad()
            seen = 0
