import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        optimizer.zero_grad()
        for x, y in cycle:
            (loss_fn(model(x), y) / len(cycle)).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.98)  # weight decay by hand, not part of the task
        optimizer.step()
