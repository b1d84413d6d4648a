import statistics
import time


def _timed(step, synchronize, steps):
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
    return (time.perf_counter() - start) * 1000 / steps


def time_training(train_step, loader, synchronize):
    batches = iter(loader)
    waits = []

    def fetch_and_step():
        t0 = time.perf_counter()
        batch = next(batches)
        waits.append(time.perf_counter() - t0)
        train_step(batch)

    for _ in range(4):
        fetch_and_step()
    loop = [_timed(fetch_and_step, synchronize, 5) for _ in range(5)]
    one = next(batches)
    for _ in range(3):
        train_step(one)
    same = [_timed(lambda: train_step(one), synchronize, 5) for _ in range(5)]
    step = statistics.median(loop)
    share = statistics.median(waits[4:]) * 1000 / step
    return {
        "step_ms": step,
        "spread_ms": [min(loop), max(loop)],
        "same_batch_ms": statistics.median(same),
        "bound": "input" if share >= 0.8 else "compute",
    }
