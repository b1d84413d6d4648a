"""Device-independent activation memory: bytes saved for backward, at their peak.

A leaf module (stdlib + torch): the harness measures the learner's run with it and the
trusted checks measure the reference micro-batch with it, the same way.
"""

import weakref

import torch


class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensorMeter:
    """Context manager that tracks live and peak bytes of tensors autograd saves.

    Parameters (and tensors sharing their storage or shape, such as the low-precision
    weight copies autocast saves) are left out: they are not activations.
    """

    def __init__(self, params):
        params = list(params)
        self._storages = {p.untyped_storage().data_ptr() for p in params}
        self._shapes = {tuple(p.shape) for p in params if p.dim() > 1}
        self.live = 0
        self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _free(self, nbytes):
        self.live -= nbytes

    def _pack(self, tensor):
        if (
            tensor.untyped_storage().data_ptr() in self._storages
            or tuple(tensor.shape) in self._shapes
        ):
            return tensor
        nbytes = tensor.numel() * tensor.element_size()
        held = _Held(tensor)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(held, self._free, nbytes)
        return held

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Held) else packed

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)
