def train(model, loader, loss_fn, optimizer, accum_steps):
    """Uma passada pelo `loader`; uma atualização do otimizador a cada `accum_steps` micro-lotes."""
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps  # o backward soma: a soma vira uma média
        loss.backward()
        if (step + 1) % accum_steps == 0:  # o ciclo está completo
            optimizer.step()
            optimizer.zero_grad()
