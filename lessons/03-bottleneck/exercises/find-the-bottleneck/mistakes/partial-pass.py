from torch.profiler import ProfilerActivity, profile, record_function

PHASES = ("data", "forward", "backward", "optimizer")
PROFILED_STEPS = 3  # "a few steps are enough to see the pattern"


def find_bottleneck(model, loader, loss_fn, optimizer):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        batches = iter(loader)
        for _ in range(PROFILED_STEPS):
            with record_function("data"):
                x, y = next(batches)
            with record_function("forward"):
                loss = loss_fn(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
    totals = {row.key: row.cpu_time_total for row in prof.key_averages() if row.key in PHASES}
    return max(totals, key=totals.get)
