import time

from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    # only the model's work is compared: "the GPU math is always the slow part"
    compute = {"forward": 0.0, "backward": 0.0}
    batches = iter(loader)
    for _ in range(len(loader)):
        with record_function("data"):
            x, y = next(batches)
        start = time.perf_counter()
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        compute["forward"] += time.perf_counter() - start
        start = time.perf_counter()
        with record_function("backward"):
            loss.backward()
        compute["backward"] += time.perf_counter() - start
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
    return max(compute, key=compute.get)
