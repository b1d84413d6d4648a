import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    """Acumule com um GradScaler; faça o clipping uma vez por atualização."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps == 0:
            scaler.unscale_(optimizer)  # o clipping vê o gradiente verdadeiro, não o escalado
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()  # uma vez por atualização: a escala não muda dentro de um ciclo
            optimizer.zero_grad()
