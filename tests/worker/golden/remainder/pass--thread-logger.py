# A background thread that logs: remainder's memory is graded from the kernel's count of the
# process (its memory run), so a thread of the loop's own may run, and the loop passes.
import queue
import threading


def train(model, loader, loss_fn, optimizer, accum_steps):
    q = queue.Queue()
    threading.Thread(target=lambda: [print(v) for v in iter(q.get, None)], daemon=True).start()
    total = len(loader)
    for i, (x, y) in enumerate(loader):
        start = i - i % accum_steps
        loss = loss_fn(model(x), y) / min(accum_steps, total - start)
        loss.backward()
        if (i + 1) % accum_steps == 0 or i + 1 == total:
            optimizer.step()
            optimizer.zero_grad()
            q.put(loss.item())
    q.put(None)
