import time

from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    batches = iter(loader)
    while True:
        start = time.perf_counter()
        with record_function("data"):
            batch = next(batches, None)
        spent["data"] += time.perf_counter() - start
        if batch is None:
            break
        x, y = batch
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
    return max(spent, key=spent.get)
