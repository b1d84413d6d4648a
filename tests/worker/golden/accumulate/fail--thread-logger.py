# A background thread that logs: refused with a named limit (one thread, one process here).
import queue
import threading


def train(model, loader, loss_fn, optimizer, accum_steps):
    q = queue.Queue()
    threading.Thread(target=lambda: [print(v) for v in iter(q.get, None)], daemon=True).start()
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            q.put(loss.item())
    q.put(None)
