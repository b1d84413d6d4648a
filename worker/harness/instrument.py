"""What the kinds' harnesses share to watch a learner's loop: parameters as plain floats, method
wrappers, the GradScaler's calls and torch's gradient clipping. A leaf module (stdlib + torch)."""

import math

import torch


def flat(tensors):
    """One plain list of floats (JSON: non-finite values become None)."""
    values = torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors])
    return [v if math.isfinite(v) else None for v in values.tolist()]


def finite(value):
    return value if math.isfinite(value) else None


def wrap_method(obj, name, before=None, after=None):
    """``obj.name`` replaced by a wrapper that calls ``before(*args, **kwargs)`` first and
    ``after(result)`` once it returned."""
    original = getattr(obj, name)

    def wrapper(*args, **kwargs):
        if before is not None:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            after(result)
        return result

    setattr(obj, name, wrapper)


def watch_scaler(scaler, rec):
    """Record a GradScaler's calls as events (scale, unscale_, scaler.step, update) and keep
    ``rec.unscaled``: whether unscale_ ran since the last update."""

    def unscale(*args, **kwargs):
        rec.event("unscale_")
        rec.unscaled = True

    def update(*args, **kwargs):
        rec.event("update")
        rec.unscaled = False

    wrap_method(scaler, "scale", lambda *a, **k: rec.event("scale"))
    wrap_method(scaler, "unscale_", unscale)
    wrap_method(scaler, "step", lambda *a, **k: rec.event("scaler.step"))
    wrap_method(scaler, "update", update)


def patch_clip(record):
    """torch's ``clip_grad_norm_``, under both names a learner imports, replaced by one that
    hands its parameters (as a list) to ``record(parameters, max_norm, clip)``, where ``clip()``
    runs the original and returns the norm. Patched before the learner's file is imported, so
    ``from torch.nn.utils import clip_grad_norm_`` sees it too."""
    original = torch.nn.utils.clip_grad.clip_grad_norm_

    def clip_grad_norm_(parameters, max_norm, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)
        return record(parameters, max_norm, lambda: original(parameters, max_norm, *args, **kwargs))

    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_
