# The scaler's methods taken once, one through functools.partial; signatures read for a log.
import functools
import inspect

import torch


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    scale, unscale = scaler.scale, functools.partial(scaler.unscale_, optimizer)
    step, update = scaler.step, scaler.update
    print(inspect.signature(step), step.__func__.__name__, unscale.func.__self__ is scaler)
    for i, (x, y) in enumerate(loader):
        scale(loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            unscale()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            step(optimizer)
            update()
            optimizer.zero_grad()
