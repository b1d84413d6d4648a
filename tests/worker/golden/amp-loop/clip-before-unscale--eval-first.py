import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
        print([float(loss_fn(model(x), y)) for x, y in loader])
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
