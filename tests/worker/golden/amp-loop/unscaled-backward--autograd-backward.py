import torch
from torch.nn.utils import clip_grad_norm_


def amp_step(model, batch, loss_fn, device_type, amp_dtype, scaler):
    x, y = batch
    with torch.autocast(device_type, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    print("scaled loss", float(scaler.scale(loss).detach()))
    torch.autograd.backward(loss)


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for batch in loader:
        model.zero_grad()
        amp_step(model, batch, loss_fn, device_type, amp_dtype, scaler)
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), max_norm=max_norm)
        scaler.step(optimizer)
        scaler.update()
