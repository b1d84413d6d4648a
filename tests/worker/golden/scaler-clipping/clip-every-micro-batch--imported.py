from torch.nn.utils import clip_grad_norm_


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    count = 0
    model.zero_grad()
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        clip_grad_norm_(model.parameters(), max_norm)
        count += 1
        if count == accum_steps:
            scaler.step(optimizer)
            scaler.update()
            model.zero_grad()
            count = 0
