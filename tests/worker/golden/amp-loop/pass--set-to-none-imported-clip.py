import torch
from torch.nn.utils import clip_grad_norm_


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    model.train()
    for step, (inputs, targets) in enumerate(loader):
        with torch.autocast(device_type=device_type, dtype=amp_dtype):
            logits = model(inputs)
            loss = loss_fn(logits, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = clip_grad_norm_(model.parameters(), max_norm=max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(
            f"step {step}: loss {loss.item():.4f}, grad norm {norm.item():.3f}, "
            f"scale {scaler.get_scale():.0f}"
        )
