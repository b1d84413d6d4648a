# Hooks that keep the saved tensors in a dict of their own and hand autograd a key.
import torch

store = {}


def pack(t):
    store[len(store)] = t
    return len(store) - 1


def unpack(key):
    return store[key]


def train(model, loader, loss_fn, optimizer, accum_steps):
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        losses = [loss_fn(model(x), y) / accum_steps for x, y in loader]
    for i, loss in enumerate(losses):
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
