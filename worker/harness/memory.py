"""Device-independent activation memory: bytes saved for backward, at their peak; and
bytes of every tensor alive, at their peak (what a checkpointed backward recomputes too).

A leaf module (stdlib + torch): the harness measures the learner's run with it and the
trusted checks measure the reference micro-batch with it, the same way.

Each meter keeps two counts that only grow, bytes in (``packed``) and bytes out (``freed``):
live bytes are their difference. In the sandbox a meter runs in the learner's process, so it
sends those counts to the supervisor (``report``) as they change; the supervisor keeps the peak
itself, and a meter whose own figure disagrees with what it sent has been tampered with.
"""

import threading
import types
import weakref
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# what a meter tells the supervisor beside its counts: ``report(packed, freed, note)``
BLIND = 1  # it saw work it could not count: interference
RECOMPUTED = 2  # a forward recomputed by torch's checkpoint: it saved in the meter's place

Report = Callable[..., object]  # report(packed, freed[, note]): ``runtime.Api.meter_report``'s
Key = tuple[int, int]  # a storage's address and size (``_storage_key``)
_T = TypeVar("_T")


class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


class SavedTensorMeter:
    """Context manager that tracks live and peak bytes of tensors autograd saves.

    Parameters (and tensors sharing their storage or shape, such as the low-precision
    weight copies autocast saves) are left out: they are not activations.
    """

    def __init__(self, params: Iterable[torch.Tensor], report: Report | None = None) -> None:
        params = list(params)
        self._storages = {p.untyped_storage().data_ptr() for p in params}
        self._shapes = {tuple(p.shape) for p in params if p.dim() > 1}
        self.packed = self.freed = 0
        self.peak = 0
        self._report = report  # report(packed, freed[, note]), after every saved tensor
        self._hooks = _MeterHooks(self._pack, self._unpack)
        # pack hooks of the program's own, counted through
        self._composed: weakref.WeakSet[Callable[[torch.Tensor], Any]] = weakref.WeakSet()

    @property
    def live(self) -> int:
        return self.packed - self.freed

    def check_on(self) -> None:
        """Where the harness knows tensors are about to be saved (a forward, a loss): report at
        once (``BLIND``) if hooks other than this meter's are on top of the stack: what autograd
        saves under them this meter never sees. Torch's checkpoint's own are not: they keep fewer
        activations, which is the point of them; a forward recomputed under them is told
        (``RECOMPUTED``), so that fewer bytes seen can be weighed against recomputations."""
        top = torch._C._autograd._top_saved_tensors_default_hooks(False)
        if self._report is None or top is None or top[0] == self._pack or top[0] in self._composed:
            return
        which = _torch_checkpoint_hook(top[0])
        if which is None:
            self._report(self.packed, self.freed, BLIND)
        elif which == "recompute":
            self._report(self.packed, self.freed, RECOMPUTED)

    def _free(self, nbytes: int) -> None:
        self.freed += nbytes

    def _excluded(self, tensor: torch.Tensor) -> bool:
        return tensor.untyped_storage().data_ptr() in self._storages or tuple(tensor.shape) in self._shapes

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._excluded(tensor):
            return tensor
        # detached: a saved output held as itself keeps its grad_fn, which owns what holds it, a
        # cycle through autograd's nodes that no collection frees, so a graph dropped without
        # backward (a loss looked at with gradients on) stayed alive (red team 8: +69.6 MiB for
        # three looks on the 160,000-row mlp; detached, +0.0, as without a meter)
        return self._hold(tensor.detach(), tensor.numel() * tensor.element_size())

    def _hold(self, value: Any, nbytes: int) -> _Held:
        held = _Held(value)
        self.packed += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(held, self._free, nbytes)
        if self._report is not None:
            self._report(self.packed, self.freed)
        return held

    @staticmethod
    def _unpack(packed: Any) -> Any:
        return packed.tensor if isinstance(packed, _Held) else packed

    def compose(
        self, pack: Callable[[torch.Tensor], Any], unpack: Callable[[Any], Any]
    ) -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], Any]]:
        """Hooks of the program's own (``saved_tensors_hooks``, ``save_on_cpu``) entered while
        this meter is on: what their ``pack`` keeps is counted (its tensors' bytes, parameters
        left out), so they save under the meter, not past it. A ``pack`` that keeps no tensor
        (the saved one stored elsewhere, out of reach) is reported (``BLIND``)."""

        def composed_pack(tensor: torch.Tensor) -> Any:
            kept = pack(tensor)
            if self._excluded(tensor):
                return kept
            found = [t for t in tree_flatten(kept)[0] if isinstance(t, torch.Tensor)]
            if not found and self._report is not None:
                self._report(self.packed, self.freed, BLIND)
            nbytes = sum(t.numel() * t.element_size() for t in found if not self._excluded(t))
            return self._hold(kept, nbytes)

        def composed_unpack(held: Any) -> Any:
            return unpack(held.tensor if isinstance(held, _Held) else held)

        self._composed.add(composed_pack)
        return composed_pack, composed_unpack

    def __enter__(self) -> "SavedTensorMeter":
        _watch_hooks()
        self._hooks.__enter__()
        _on().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _on():
            _on().remove(self)
        return self._hooks.__exit__(*exc)


class _MeterHooks(torch.autograd.graph.saved_tensors_hooks):
    """A meter's own hooks: never composed with another meter's."""


_THREAD = threading.local()
_WATCHING: list[bool] = []  # [True] once saved_tensors_hooks composes


def _on() -> list[SavedTensorMeter]:
    """This thread's saved-tensor meters that are on, innermost last (hooks are per thread)."""
    if not hasattr(_THREAD, "meters"):
        _THREAD.meters = []
    return _THREAD.meters


def _watch_hooks() -> None:
    """``saved_tensors_hooks`` (and so ``save_on_cpu``) entered while a saved-tensor meter is on
    push hooks composed with it (``SavedTensorMeter.compose``); torch's checkpoint's own, and
    the meters', are left as they are. Patched once per process that meters."""
    if _WATCHING:
        return
    _WATCHING.append(True)
    hooks = torch.autograd.graph.saved_tensors_hooks
    from torch.utils import checkpoint

    own = (checkpoint._checkpoint_hook, checkpoint._recomputation_hook)
    enter = hooks.__enter__

    def __enter__(self: torch.autograd.graph.saved_tensors_hooks) -> None:
        meters = _on()
        if not meters or isinstance(self, (*own, _MeterHooks)):
            return enter(self)
        meter = meters[-1]
        return torch._C._autograd._push_saved_tensors_default_hooks(
            *meter.compose(self.pack_hook, self.unpack_hook)
        )

    hooks.__enter__ = __enter__  # type: ignore[method-assign, unused-ignore]


_TORCH_HOOKS: dict[Any, Any] = {}  # code objects: checkpoint's pack hooks → which; "wrap" → dynamo's wrappers


def _codes(module: types.ModuleType) -> list[types.CodeType]:
    """Every code object ``module`` defines: its functions', its classes' methods', nested."""
    holders = (
        module,
        *[v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__],
    )
    return [
        found
        for holder in holders
        for member in vars(holder).values()
        if hasattr(member, "__code__")
        for found in _codes_within(member.__code__)
    ]


def _codes_within(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in it."""
    found, todo = [], [code]
    while todo:
        code = todo.pop()
        found.append(code)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def _torch_checkpoint_hook(pack: Any) -> str | None:
    """``"forward"`` if ``pack`` is the pack hook torch's checkpoint sets around a checkpointed
    forward, ``"recompute"`` if it is the one around its recomputation in backward, else None.
    Known by code object; the recomputation's is wrapped in dynamo's ``disable``, and the
    function called is the one in the wrapper's closure, whatever its ``__wrapped__`` says."""
    if not _TORCH_HOOKS:
        from torch._dynamo import eval_frame
        from torch.utils import checkpoint

        for which, holder in (
            ("forward", checkpoint._checkpoint_hook),
            ("recompute", checkpoint._recomputation_hook),
        ):
            for found in _codes_within(holder.__init__.__code__):
                if found.co_name == "pack_hook":
                    _TORCH_HOOKS[found] = which
        _TORCH_HOOKS["wrap"] = [c for c in _codes(eval_frame) if c.co_name == "_fn" and "fn" in c.co_freevars]
    code = getattr(pack, "__code__", None)
    if code is not None and code in _TORCH_HOOKS["wrap"]:
        cells = dict(zip(code.co_freevars, pack.__closure__ or (), strict=False))
        code = getattr(cells["fn"].cell_contents, "__code__", None) if "fn" in cells else None
    return _TORCH_HOOKS.get(code) if code is not None else None


def _storage_key(tensor: torch.Tensor) -> Key | None:
    """A storage's identity: its address and size (an alias — view, detach — shares both)."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse or meta tensors have no plain storage
        return None
    return storage.data_ptr(), storage.nbytes()


_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


def _parts(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding ``tensor``'s memory: itself, or a sparse tensor's indices and
    values (no storage of its own, and just as much memory)."""
    if tensor.layout == torch.sparse_coo:
        return [tensor._indices(), tensor._values()]
    if tensor.layout in _COMPRESSED:
        return [getattr(tensor, name)() for name in _COMPRESSED[tensor.layout]] + [tensor.values()]
    return [tensor]


class LiveTensorMeter(TorchDispatchMode):
    """Context manager that tracks live and peak bytes of every tensor storage an op
    creates while it is active — forward, backward and any recomputation — as
    ``max_memory_allocated`` would on a GPU, on any device. Parameters are left out, and
    so is an op's output that aliases one of its inputs (a view, ``detach``, an in-place
    op): it allocates nothing, whether that storage was made before the meter or under it.

    Autograd tells it too: a tensor saved for backward whose storage no op showed it (made
    while its dispatch mode was off the stack) is counted from then on, as long as it lives,
    unless it is one of ``inputs`` (the step's own arguments, made before it); and a tensor
    saved while the mode is off the stack is reported at once (``BLIND``): the
    meter cannot see that step, and torch's own training code never takes it off. So is a
    parameter's gradient accumulated while the mode is off the stack."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        report: Report | None = None,
        inputs: Iterable[torch.Tensor] = (),
    ) -> None:
        super().__init__()
        params = list(params)
        self._weights = [p for p in params if p.requires_grad]
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._params = {_storage_key(p) for p in params}
        self._inputs = {_storage_key(t) for t in inputs}
        self._live: dict[Key, StorageWeakRef] = {}  # (storage address, bytes) → weak reference
        self.packed = self.freed = 0
        self.peak = 0
        self._report = report  # report(packed, freed), after every op that allocated
        self._hooks = _MeterHooks(self._saved, _itself)

    def __enter__(self) -> "LiveTensorMeter":
        self._hooks.__enter__()
        self._handles = [p.register_post_accumulate_grad_hook(self._check_on) for p in self._weights]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        try:
            return super().__exit__(*exc)
        finally:
            for handle in self._handles:
                handle.remove()
            self._hooks.__exit__(*exc)

    def _check_on(self, *_: object) -> None:
        """Report at once if this meter's mode is not on the stack where it must be."""
        if self._report is not None and self not in _python_dispatch._get_current_dispatch_mode_stack():
            self._report(self.packed, self.freed, BLIND)

    def _saved(self, tensor: torch.Tensor) -> torch.Tensor:
        self._check_on()
        for part in _parts(tensor):
            self._new(part, self._inputs)
        return tensor.detach()  # as SavedTensorMeter._pack: no cycle through a saved output

    def _new(self, tensor: torch.Tensor, made_before: Collection[Key | None]) -> None:
        """Count ``tensor``'s storage unless it is a parameter's, one of ``made_before``, or
        empty; a tensor with memory but no storage to know it by is reported (``BLIND``)."""
        key = _storage_key(tensor)
        if key is None:
            if tensor.numel() and tensor.device.type != "meta" and self._report is not None:
                self._report(self.packed, self.freed, BLIND)
        elif key[1] and key not in self._params and key not in made_before:
            self._count(key, tensor)

    def _count(self, key: Key, tensor: torch.Tensor) -> None:
        """Count ``tensor``'s storage as allocated now, unless it is counted and alive."""
        held = self._live.get(key)
        if held is None or held.expired():
            if held is not None:  # the same address and size again: the old one is gone
                self.freed += key[1]
            packed = self.packed
            self._live[key] = StorageWeakRef(tensor.untyped_storage())
            self.packed += key[1]
            self.peak = max(self.peak, self.live())
            if self._report is not None and self.packed != packed:
                self._report(self.packed, self.freed)

    def live(self) -> int:
        for key, ref in list(self._live.items()):
            if ref.expired():
                del self._live[key]
                self.freed += key[1]
        return self.packed - self.freed

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        given = [p for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) for p in _parts(t)]
        inputs = {_storage_key(t) for t in given}
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                for part in _parts(tensor):
                    self._new(part, inputs)
        self.peak = max(self.peak, self.live())
        return out


def _itself(tensor: _T) -> _T:
    return tensor
