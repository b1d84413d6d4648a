from torch.profiler import ProfilerActivity, profile, record_function

PHASES = ("data", "forward", "backward", "optimizer")


def find_bottleneck(model, loader, loss_fn, optimizer):
    """Rotule cada fase com record_function, meça e devolva o nome da fase mais lenta."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        batches = iter(loader)
        for _ in range(len(loader)):
            with record_function("data"):
                x, y = next(batches)  # a própria busca, dentro do rótulo
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
    totals = {row.key: row.cpu_time_total for row in prof.key_averages() if row.key in PHASES}
    print({phase: round(us / 1000, 1) for phase, us in totals.items()}, "ms")
    return max(totals, key=totals.get)
