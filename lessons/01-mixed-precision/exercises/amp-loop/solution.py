import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """Mixed precision: 16-bit forward under autocast, loss scaling with the GradScaler."""
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)  # linear layers in float16, the loss in float32
        scaler.scale(loss).backward()  # outside autocast
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)  # skipped when a gradient is inf or NaN
        scaler.update()  # halves the scale after a skip, grows it after clean steps
