# Timings from the profiler's table, with a OneCycleLR stepped after every update.
from torch.optim.lr_scheduler import OneCycleLR
from torch.profiler import profile, record_function


def find_bottleneck(model, loader, loss_fn, optimizer):
    sched = OneCycleLR(optimizer, max_lr=0.1, total_steps=len(loader))
    with profile() as prof:
        for data, target in loader_iter(loader):
            with record_function("forward"):
                output = model(data)
                loss = loss_fn(output, target)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    table = {e.key: e.cpu_time_total for e in prof.key_averages()}
    names = ("data", "forward", "backward", "optimizer")
    return max(names, key=lambda n: table.get(n, 0))


def loader_iter(loader):
    it = iter(loader)
    while True:
        with record_function("data"):
            try:
                batch = next(it)
            except StopIteration:
                return
        yield batch
