import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """The logged losses run under autocast, the training forwards in float32."""
    for x, y in loader:
        with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
            print(loss_fn(model(x), y).item())
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
