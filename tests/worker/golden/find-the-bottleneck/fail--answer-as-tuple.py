# The right phase, returned with its time as a tuple: a wrong kind of answer, not a wrong
# phase (it was named wrong-phase-named); the answer check says to return the name alone.
import time

from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    batches = iter(loader)
    for _ in range(len(loader)):
        start = time.perf_counter()
        with record_function("data"):
            x, y = next(batches)
        spent["data"] += time.perf_counter() - start
        start = time.perf_counter()
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        spent["forward"] += time.perf_counter() - start
        start = time.perf_counter()
        with record_function("backward"):
            loss.backward()
        spent["backward"] += time.perf_counter() - start
        start = time.perf_counter()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        spent["optimizer"] += time.perf_counter() - start
    slowest = max(spent, key=spent.get)
    return slowest, round(spent[slowest] * 1000, 1)
