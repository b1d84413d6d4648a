import statistics
import time


def _repeats(step, synchronize, repeats=5, steps=6):
    times = []
    for _ in range(repeats):
        synchronize()
        began = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize()
        times.append((time.perf_counter() - began) * 1000 / steps)
    return times


def time_training(train_step, loader, synchronize):
    it = iter(loader)

    def with_loader():
        train_step(next(it))

    for _ in range(4):  # warm-up, untimed
        with_loader()
    loop = _repeats(with_loader, synchronize)
    batch = next(it)
    for _ in range(2):
        train_step(batch)
    same = _repeats(lambda: train_step(batch), synchronize)
    step, one = statistics.median(loop), statistics.median(same)
    saved = step - one  # what the loader costs: the same-batch test's saving
    return {
        "step_ms": step,
        "spread_ms": [min(loop), max(loop)],
        "same_batch_ms": one,
        "bound": "input" if saved >= 0.5 * step else "compute",  # a large share, not a small one
    }
