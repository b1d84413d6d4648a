# The PyTorch AMP recipe with a MultiStepLR whose milestones lie past this run.
import torch
from torch.optim.lr_scheduler import MultiStepLR


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    scheduler = MultiStepLR(optimizer, milestones=[1000, 2000], gamma=0.5)
    for inputs, labels in loader:
        with torch.autocast(device_type=device_type, dtype=amp_dtype):
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
