# A background thread that logs the clipped norm and the scale of each update: a thread of the
# loop's own may run here (memory is the kernel's count of the process, in a memory run).
import queue
import threading

import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    q = queue.Queue()
    threading.Thread(target=lambda: [print(*v) for v in iter(q.get, None)], daemon=True).start()
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader, start=1):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        if i % accum_steps:
            continue
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        q.put((float(norm), scale))
    q.put(None)
