from collections import defaultdict
from time import perf_counter

from torch.autograd.profiler import record_function

WARMUP, MEASURED = 1, 3


def timed(totals, name, fn):
    start = perf_counter()
    with record_function(name):
        out = fn()
    totals[name] += perf_counter() - start
    return out


def find_bottleneck(model, loader, loss_fn, optimizer):
    totals = defaultdict(float)
    it = iter(loader)
    for step in range(WARMUP + MEASURED):
        x, y = timed(totals, "data", lambda: next(it))
        loss = timed(totals, "forward", lambda x=x, y=y: loss_fn(model(x), y))
        timed(totals, "backward", loss.backward)
        timed(totals, "optimizer", lambda: (optimizer.step(), optimizer.zero_grad()))
        if step < WARMUP:
            totals.clear()
    return max(totals, key=totals.get)
