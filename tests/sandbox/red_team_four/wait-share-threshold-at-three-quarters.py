import time

REPEATS, STEPS, WARM_UP = 5, 6, 3


def time_steps(step, synchronize):
    """Milliseconds per step over STEPS steps, the device drained before and after."""
    synchronize()
    start = time.perf_counter()
    for _ in range(STEPS):
        step()
    synchronize()
    return (time.perf_counter() - start) * 1000 / STEPS


def repeated(step, synchronize):
    """Warm up, then REPEATS timings: sorted, so the middle one is the median."""
    for _ in range(WARM_UP):
        step()
    return sorted(time_steps(step, synchronize) for _ in range(REPEATS))


def time_training(train_step, loader, synchronize):
    batches = iter(loader)

    waited = []

    def loader_step():  # the wait in next() decides: an upper bound, not the verdict
        start = time.perf_counter()
        x = next(batches)
        waited.append(time.perf_counter() - start)
        train_step(x)

    runs = repeated(loader_step, synchronize)
    x = next(batches)  # one batch, already fetched: the same-batch test
    same = repeated(lambda: train_step(x), synchronize)
    step_ms, same_ms = runs[REPEATS // 2], same[REPEATS // 2]
    print(f"loop {step_ms:.1f} ms ({runs[0]:.1f}–{runs[-1]:.1f}), same batch {same_ms:.1f} ms")
    return {
        "step_ms": step_ms,
        "spread_ms": [runs[0], runs[-1]],
        "same_batch_ms": same_ms,
        "bound": "input" if sum(waited) / len(waited) * 1000 > 0.75 * step_ms else "compute",
    }
