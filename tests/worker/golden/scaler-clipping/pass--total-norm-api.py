# torch 2.6's split clipping API: get_total_norm, then clip_grads_with_norm_.
from torch.nn.utils import clip_grads_with_norm_, get_total_norm


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    params = [p for p in model.parameters()]
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            grads = [p.grad for p in params if p.grad is not None]
            norm = get_total_norm(grads)
            clip_grads_with_norm_(params, max_norm, norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
