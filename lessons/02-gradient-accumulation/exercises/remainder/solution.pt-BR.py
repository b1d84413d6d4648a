def train(model, loader, loss_fn, optimizer, accum_steps):
    """Uma passada pelo `loader`; o último ciclo, incompleto, também atualiza."""
    total = len(loader)
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        start = step - step % accum_steps
        cycle = min(accum_steps, total - start)  # micro-lotes neste ciclo
        loss = loss_fn(model(x), y) / cycle
        loss.backward()
        if (step + 1) % accum_steps == 0 or step + 1 == total:
            optimizer.step()
            optimizer.zero_grad()
