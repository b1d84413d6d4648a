import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
