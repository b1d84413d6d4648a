def train(model, loader, loss_fn, optimizer, accum_steps):
    """Uma atualização a cada `accum_steps` micro-lotes, dividida pelos tokens reais do ciclo."""
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]  # só tensores: nenhuma ativação ainda
        n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
        optimizer.zero_grad()
        for x, y in cycle:
            loss = loss_fn(model(x), y).sum() / n_tokens
            loss.backward()
        optimizer.step()
