import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """Between the backward and the clip, the loss of the next batch at the weights before the
    step, under no_grad (a forward on another batch between a batch's backward and its step)."""
    batches = list(loader)
    for i, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if i + 1 < len(batches):
            nx, ny = batches[i + 1]
            with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
                print("next batch's loss now", loss_fn(model(nx), ny).item())
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
