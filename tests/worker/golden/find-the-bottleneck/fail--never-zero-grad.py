# Its own clock, and .grad never zeroed: each step moves the parameters by every gradient since the
# start (the supervisor's readings: each update is the one before it plus this batch's step).
import time

from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    it = iter(loader)
    for _ in range(len(loader)):
        t = time.perf_counter()
        with record_function("data"):
            x, y = next(it)
        spent["data"] += time.perf_counter() - t
        t = time.perf_counter()
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        spent["forward"] += time.perf_counter() - t
        t = time.perf_counter()
        with record_function("backward"):
            loss.backward()
        spent["backward"] += time.perf_counter() - t
        t = time.perf_counter()
        with record_function("optimizer"):
            optimizer.step()  # no zero_grad
        spent["optimizer"] += time.perf_counter() - t
    return max(spent, key=spent.get)
