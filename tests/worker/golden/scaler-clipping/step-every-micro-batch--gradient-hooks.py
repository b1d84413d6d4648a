# The loss is not divided: hooks on the parameters divide each gradient by accum_steps (right),
# but the optimizer steps on every micro-batch. The hooks must not make the check's unit
# gradients 1/accum_steps of the micro-batches' own.
import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    for p in model.parameters():
        p.register_hook(lambda g: g / accum_steps)
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
