import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """The solution, after printing the starting loss over the data (no gradients, no step)."""
    with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
        start = [float(loss_fn(model(x), y)) for x, y in loader]
    print("starting losses:", start)
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
