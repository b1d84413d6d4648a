import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """After each update, the loss of the same batch at the new weights, logged under no_grad."""
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
            after = loss_fn(model(x), y).item()
        print(f"step {step}: loss {loss.item():.4f} -> {after:.4f}, scale {scaler.get_scale():.0f}")
