# Clips the scaled gradients at max_norm × scale and leaves the unscaling to scaler.step.
import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps:
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
