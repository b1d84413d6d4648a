import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """Each batch trained on twice, with a logged loss under no_grad between: the weights leave
    the instructor's path after batch 1."""
    for x, y in loader:
        for _ in range(2):
            optimizer.zero_grad()
            with torch.autocast(device_type, dtype=amp_dtype):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
                print(loss_fn(model(x), y).item())
