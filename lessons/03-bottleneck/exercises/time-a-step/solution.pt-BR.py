import time

REPEATS, STEPS, WARM_UP = 5, 6, 3


def time_steps(step, synchronize):
    """Milissegundos por passo em STEPS passos, com o dispositivo esvaziado antes e depois."""
    synchronize()
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    synchronize()
    return (time.perf_counter() - start) * 1000 / STEPS


def repeated(step, synchronize):
    """Aqueça, depois REPEATS medições: em ordem, para que a do meio seja a mediana."""
    for _ in range(WARM_UP):
        step()
    return sorted(time_steps(step, synchronize) for _ in range(REPEATS))


def time_training(train_step, loader, synchronize):
    batches = iter(loader)

    def loader_step():  # o que o loop de treino faz: buscar, depois lançar
        train_step(next(batches))

    runs = repeated(loader_step, synchronize)
    x = next(batches)  # um lote, já buscado: o teste do mesmo lote
    same = repeated(lambda: train_step(x), synchronize)
    step_ms, same_ms = runs[REPEATS // 2], same[REPEATS // 2]
    print(f"loop {step_ms:.1f} ms ({runs[0]:.1f}–{runs[-1]:.1f}), same batch {same_ms:.1f} ms")
    return {
        "step_ms": step_ms,
        "spread_ms": [runs[0], runs[-1]],
        "same_batch_ms": same_ms,
        # o loader custa o que o teste do mesmo lote economiza; um quarto do passo
        # vai muito além da variação
        "bound": "input" if step_ms - same_ms > 0.25 * step_ms else "compute",
    }
