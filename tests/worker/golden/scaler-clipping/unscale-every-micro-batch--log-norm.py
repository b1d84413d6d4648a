# unscale_ on every micro-batch to log the true gradient norm as the cycle fills: GradScaler
# refuses the second call before update() (RuntimeError), which names the mistake.
import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    optimizer.zero_grad()
    norms = []
    for i, (x, y) in enumerate(loader, start=1):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        scaler.unscale_(optimizer)
        norms.append(float(torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))))
        if i % accum_steps:
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    print("gradient norms:", norms)
