import torch


def forward_loss(model, loss_fn, x, y, device_type, amp_dtype):
    with torch.autocast(device_type, dtype=amp_dtype):
        return loss_fn(model(x), y)


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    params = list(model.parameters())
    for x, y in loader:
        model.zero_grad()
        scaled = scaler.scale(forward_loss(model, loss_fn, x, y, device_type, amp_dtype))
        scaled.backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        scaler.step(optimizer)
        scaler.update()
