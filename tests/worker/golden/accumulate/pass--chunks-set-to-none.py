# chunk the loader, zero at the start of each cycle (keeping zero tensors), log the loss
import itertools

import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = iter(loader)
    while chunk := list(itertools.islice(batches, accum_steps)):
        optimizer.zero_grad(set_to_none=False)
        running = 0.0
        for x, y in chunk:
            loss = loss_fn(model(x), y)
            (loss / len(chunk)).backward()
            with torch.no_grad():
                running += loss_fn(model(x), y).item()  # a second, gradient-free look
        optimizer.step()
        print(f"cycle loss {running / len(chunk):.4f}")
