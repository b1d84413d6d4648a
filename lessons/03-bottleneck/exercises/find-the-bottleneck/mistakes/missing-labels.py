from torch.profiler import profile, record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    with profile() as prof:
        for x, y in loader:
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    totals = {r.key: r.cpu_time_total for r in prof.key_averages()
              if r.key in ("forward", "backward")}
    return max(totals, key=totals.get)
