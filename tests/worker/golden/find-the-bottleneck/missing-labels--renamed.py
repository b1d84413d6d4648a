from torch.profiler import profile, record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    with profile() as prof:
        batches = iter(loader)
        for _ in range(len(loader)):
            with record_function("load"):
                x, y = next(batches)
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("step"):
                optimizer.step()
                optimizer.zero_grad()
    names = ("load", "forward", "backward", "step")
    rows = [r for r in prof.key_averages() if r.key in names]
    return max(rows, key=lambda r: r.cpu_time_total).key
