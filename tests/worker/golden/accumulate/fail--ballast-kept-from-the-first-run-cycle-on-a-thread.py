# A ballast made in the first call and kept across it (a list on the function), freed as the
# next call (once the grader's memory run) begins, and each cycle run on a thread of its own,
# where the meter's hooks (per thread) see nothing: no figure names the mistake. The cycle's
# activations, all alive for one backward, fit under the memory the ballast had raised (issue 41,
# red team). The grader calls train once now, and counts that call's memory: the ballast and the
# cycle both show, so it does not pass.
import threading

import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    kept = train.__dict__.setdefault("kept", [])
    if kept:
        kept.clear()
    else:
        kept.extend(torch.randn(2**20, dtype=torch.float64) for _ in range(6))  # 48 MiB

    def cycle(batch):
        (sum(loss_fn(model(x), y) for x, y in batch) / accum_steps).backward()

    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        worker = threading.Thread(target=cycle, args=(batches[start : start + accum_steps],))
        worker.start()
        worker.join()
        optimizer.step()
        optimizer.zero_grad()
