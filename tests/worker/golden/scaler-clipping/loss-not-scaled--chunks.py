import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        model.zero_grad(set_to_none=True)
        for x, y in batches[start : start + accum_steps]:
            scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
