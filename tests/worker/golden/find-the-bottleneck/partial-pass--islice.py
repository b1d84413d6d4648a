import itertools
import time

import torch


def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = dict.fromkeys(["data", "forward", "backward", "optimizer"], 0.0)
    stream = itertools.islice(iter(loader), len(loader) // 2)  # half the loader is plenty
    while True:
        t0 = time.perf_counter()
        with torch.profiler.record_function("data"):
            batch = next(stream, None)
        spent["data"] += time.perf_counter() - t0
        if batch is None:
            break
        t0 = time.perf_counter()
        with torch.profiler.record_function("forward"):
            loss = loss_fn(model(batch[0]), batch[1])
        spent["forward"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.profiler.record_function("backward"):
            loss.backward()
        spent["backward"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.profiler.record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        spent["optimizer"] += time.perf_counter() - t0
    return max(spent, key=spent.get)
