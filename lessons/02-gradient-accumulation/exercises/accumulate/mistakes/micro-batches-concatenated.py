import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    xs, ys = [], []
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        if len(xs) == accum_steps:
            optimizer.zero_grad()
            loss_fn(model(torch.cat(xs)), torch.cat(ys)).backward()
            optimizer.step()
            xs, ys = [], []
