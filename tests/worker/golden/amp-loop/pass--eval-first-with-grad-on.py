import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """The starting losses computed with gradients on (a graph built and dropped, no backward)."""
    with torch.autocast(device_type, dtype=amp_dtype):
        start = [loss_fn(model(x), y).item() for x, y in loader]
    print("start", start)
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
