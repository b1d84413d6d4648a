from torch.nn.utils import clip_grad_norm_


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    for i, (x, y) in enumerate(loader):
        if i % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss_fn(model(x), y) * (1 / accum_steps)).backward()
        if i % accum_steps == accum_steps - 1:
            scaler.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), max_norm=max_norm)
            scaler.step(optimizer)
            scaler.update()
