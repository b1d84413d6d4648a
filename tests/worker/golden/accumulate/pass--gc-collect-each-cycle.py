# A right loop that runs the garbage collector after every update, as loops short of memory do.
# A collection writes to every object it walks: in a child started by exec, objects shared with
# the sandbox's supervisor had their pages copied and counted from the file's load on (100 MiB,
# a "held" failure); the harness now collects and freezes them before it begins to watch.
import gc


def train(model, loader, loss_fn, optimizer, accum_steps):
    gc.collect()
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            gc.collect()
