import torch

LOSS_WEIGHT = 0.1  # "smaller losses are safer in float16"


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = LOSS_WEIGHT * loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
