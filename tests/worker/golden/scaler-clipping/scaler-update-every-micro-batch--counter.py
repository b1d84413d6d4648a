import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    i = 0
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        scaler.update()
        i += 1
        if i % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            optimizer.zero_grad()
