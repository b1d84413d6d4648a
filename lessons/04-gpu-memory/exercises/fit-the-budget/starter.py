import torch
from torch.utils.checkpoint import checkpoint


def train_step(model, x, y, loss_fn, optimizer):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
