import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    optimizer.zero_grad()
    total = 0
    for step, (x, y) in enumerate(loader):
        total = total + loss_fn(model(x), y) / accum_steps
        if (step + 1) % accum_steps == 0:
            scaler.scale(total).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            total = 0
