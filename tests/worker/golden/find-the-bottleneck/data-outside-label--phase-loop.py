import time

from torch.autograd.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {}
    for x, y in loader:
        for phase in ("data", "forward", "backward", "optimizer"):
            start = time.perf_counter()
            with record_function(phase):
                if phase == "forward":
                    loss = loss_fn(model(x), y)
                elif phase == "backward":
                    loss.backward()
                elif phase == "optimizer":
                    optimizer.step()
                    optimizer.zero_grad()
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start
    return max(spent, key=spent.get)
