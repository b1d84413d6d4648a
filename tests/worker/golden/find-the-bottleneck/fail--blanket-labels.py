# each label opened once around the whole loop, the phases timed by hand: nothing is labelled
import time
from contextlib import ExitStack

from torch.profiler import record_function

PHASES = ("data", "forward", "backward", "optimizer")


def find_bottleneck(model, loader, loss_fn, optimizer):
    # no phase is labelled: one range of every name blankets the whole loop;
    # the answer comes from a stopwatch, not from the labels
    spent = dict.fromkeys(PHASES, 0.0)
    with ExitStack() as stack:
        for name in PHASES:
            stack.enter_context(record_function(name))
        batches = iter(loader)
        for _ in range(len(loader)):
            t0 = time.perf_counter()
            x, y = next(batches)
            t1 = time.perf_counter()
            loss = loss_fn(model(x), y)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad()
            t4 = time.perf_counter()
            for name, a, b in zip(PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4), strict=True):
                spent[name] += b - a
    return max(spent, key=spent.get)
