import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """A warm-up that is not only a look: one whole update on the first batch before the loop,
    so that batch is trained on twice."""
    batches = list(loader)

    def update(x, y):
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()

    update(*batches[0])
    for x, y in batches:
        update(x, y)
