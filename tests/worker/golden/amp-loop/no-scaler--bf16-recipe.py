import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    # the bfloat16 recipe: autocast alone
    for x, y in loader:
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
