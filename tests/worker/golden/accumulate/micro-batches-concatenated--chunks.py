import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        chunk = batches[start : start + accum_steps]
        x = torch.cat([b[0] for b in chunk])
        y = torch.cat([b[1] for b in chunk])
        model.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
