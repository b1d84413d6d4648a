import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if (step + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
