import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """A warm-up pass on the first batch before the loop, and an inference-mode look at every
    batch before its training forward."""
    batches = list(loader)
    with torch.inference_mode(), torch.autocast(device_type, dtype=amp_dtype):
        model(batches[0][0])
    for x, y in batches:
        with torch.no_grad():
            before = model(x).argmax(dim=1).eq(y).float().mean().item()
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        print(f"accuracy before the step {before:.2f}")
