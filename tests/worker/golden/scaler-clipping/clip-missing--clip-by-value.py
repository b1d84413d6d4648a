import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)  # by value, not by norm
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
