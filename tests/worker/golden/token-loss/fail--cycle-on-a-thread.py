# Each cycle's forwards and its one backward on a thread of the loop's own, where the meter's
# hooks (per thread) see nothing saved: no figure names the mistake. Threads may run here (the
# memory run is the kernel's count of the process, which holds them), and that count sees the
# cycle's activations alive together (issue 41).
import threading


def train(model, loader, loss_fn, optimizer, accum_steps):
    def cycle(batch):
        count = sum(int((y != -100).sum()) for _, y in batch)
        (sum(loss_fn(model(x), y).sum() for x, y in batch) / count).backward()

    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        worker = threading.Thread(target=cycle, args=(batches[start : start + accum_steps],))
        worker.start()
        worker.join()
        optimizer.step()
        optimizer.zero_grad()
