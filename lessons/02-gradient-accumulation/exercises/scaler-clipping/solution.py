import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    """Accumulate with a GradScaler; clip once per update."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)  # clip the true gradient, not the scaled one
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()  # once per update: the scale stays fixed within a cycle
            optimizer.zero_grad()
