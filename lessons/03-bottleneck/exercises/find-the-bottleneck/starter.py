from torch.profiler import record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    """Label each phase with record_function, measure, return the slowest phase's name."""
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return "?"
