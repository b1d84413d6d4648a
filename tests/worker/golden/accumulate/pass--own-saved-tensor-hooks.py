# The learner's own saved-tensor hooks (the autograd docs' example: pack/unpack as is).
import torch


def pack(t):
    return t


def unpack(t):
    return t


def train(model, loader, loss_fn, optimizer, accum_steps):
    for i, (x, y) in enumerate(loader):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
