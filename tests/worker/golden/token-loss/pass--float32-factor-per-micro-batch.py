import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        count = torch.stack([(y != -100).sum() for _, y in cycle]).sum()
        factor = torch.reciprocal(count.float())
        optimizer.zero_grad()
        for x, y in cycle:
            (loss_fn(model(x), y).sum() * factor).backward()
        optimizer.step()
