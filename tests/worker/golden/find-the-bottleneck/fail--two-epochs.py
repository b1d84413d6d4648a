from torch.profiler import ProfilerActivity, profile, record_function

EPOCHS = 2


def find_bottleneck(model, loader, loss_fn, optimizer):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(EPOCHS):
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
    names = ("data", "forward", "backward", "optimizer")
    rows = [row for row in prof.key_averages() if row.key in names]
    return max(rows, key=lambda row: row.cpu_time_total).key
