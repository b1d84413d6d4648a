# A background thread that logs each cycle's loss per token: token-loss's memory is graded from
# the kernel's count of the process (its memory run), so a thread of the loop's own may run.
import queue
import threading


def train(model, loader, loss_fn, optimizer, accum_steps):
    q = queue.Queue()
    threading.Thread(target=lambda: [print(f"{v:.4f}") for v in iter(q.get, None)], daemon=True).start()
    pending = []
    for x, y in loader:
        pending.append((x, y))
        if len(pending) < accum_steps:
            continue
        count = sum((y != -100).sum() for _, y in pending)
        optimizer.zero_grad()
        total = 0.0
        for x, y in pending:
            loss = loss_fn(model(x), y).sum() / count
            loss.backward()
            total += loss.item()
        optimizer.step()
        q.put(total)
        pending = []
    q.put(None)
