"""What the kinds' harnesses share to watch a learner's loop: parameters as plain floats, method
wrappers, the GradScaler's calls and torch's gradient clipping. A leaf module (stdlib + torch)."""

import contextlib
import functools
import math
import os
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn, Protocol, TypeVar

import torch

_T = TypeVar("_T")


def flat(tensors: Iterable[torch.Tensor]) -> list[float | None]:
    """One plain list of floats (JSON: non-finite values become None)."""
    values = torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors])
    return [v if math.isfinite(v) else None for v in values.tolist()]


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def wrap_method(
    obj: object,
    name: str,
    before: Callable[..., object] | None = None,
    after: Callable[[Any], object] | None = None,
    during: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
) -> None:
    """``obj.name`` replaced by a bound method (``__func__``, the original's signature: torch's LR
    schedulers rebind ``optimizer.step.__func__``) that calls ``before(*args, **kwargs)`` first and
    ``after(result)`` once it returned, the whole call inside ``during()`` (a context manager)
    when given."""
    original = getattr(obj, name)

    @functools.wraps(getattr(original, "__func__", original))
    def wrapper(self: object, *args: Any, **kwargs: Any) -> Any:
        with during() if during is not None else contextlib.nullcontext():
            if before is not None:
                before(*args, **kwargs)
            result = original(*args, **kwargs)
            if after is not None:
                after(result)
            return result

    setattr(obj, name, types.MethodType(wrapper, obj))


def wrap_step(
    optimizer: torch.optim.Optimizer,
    before: Callable[[], object] | None = None,
    after: Callable[[Any], object] | None = None,
) -> None:
    """``optimizer.step`` wrapped as ``wrap_method`` does, where ``before()`` sees the gradient
    the update uses: with ``step(closure)``, once the closure has run (the optimizer is then
    handed its loss; torch's optimizers but L-BFGS call the closure once)."""
    original = optimizer.step

    @functools.wraps(getattr(original, "__func__", original))
    def step(self: object, closure: Callable[[], Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            closure = functools.partial(_given, loss)
        if before is not None:
            before()
        result = original(closure, *args, **kwargs) if closure is not None else original(*args, **kwargs)
        if after is not None:
            after(result)
        return result

    optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]  # the wrapped step


def _given(value: _T) -> _T:
    return value


class Recorder(Protocol):
    """What ``watch_scaler`` records a GradScaler's calls into (a kind's record)."""

    unscaled: bool

    def event(self, *item: Any) -> object: ...


def watch_scaler(scaler: Any, rec: Recorder, sync: Callable[[str], object] | None = None) -> None:
    """Record a GradScaler's calls as events (scale, unscale_, scaler.step, update) and keep
    ``rec.unscaled``: whether unscale_ ran since the last update. The ``unscale_`` that
    ``scaler.step`` makes itself, where the loop did not, is the scaler's, not the loop's: not
    recorded. ``sync(code)``, when given, tells the supervisor of each call as it happens (a
    sync it counts itself: ``update.new_scale`` for an update handed a scale of the loop's own,
    the scale set by hand)."""
    inside = {"step": False}
    tell = sync if sync is not None else (lambda code: None)

    def scale(*args: Any, **kwargs: Any) -> None:
        rec.event("scale")
        tell("scale")

    def unscale(*args: Any, **kwargs: Any) -> None:
        if not inside["step"]:
            rec.event("unscale_")
            tell("unscale_")
            rec.unscaled = True

    def step(*args: Any, **kwargs: Any) -> None:
        rec.event("scaler.step")
        tell("scaler.step")

    def update(*args: Any, **kwargs: Any) -> None:
        rec.event("update")
        given = (args[0] if args else kwargs.get("new_scale")) is not None
        tell("update.new_scale" if given else "update")
        rec.unscaled = False

    @contextlib.contextmanager
    def stepping() -> Iterator[None]:
        inside["step"] = True
        try:
            yield
        finally:
            inside["step"] = False

    wrap_method(scaler, "scale", scale)
    wrap_method(scaler, "unscale_", unscale)
    wrap_method(scaler, "step", step, during=stepping)
    wrap_method(scaler, "update", update)


def patch_clip(record: Callable[[list[torch.Tensor], Any, Callable[[], Any]], Any]) -> None:
    """torch's ``clip_grad_norm_``, under both names a learner imports, replaced by one that
    hands its parameters (as a list) to ``record(parameters, max_norm, clip)``, where ``clip()``
    runs the original and returns the norm. Patched before the learner's file is imported, so
    ``from torch.nn.utils import clip_grad_norm_`` sees it too. The same for its public second
    half, ``clip_grads_with_norm_`` (after ``get_total_norm``): a clip written as torch's two
    halves is a clip (issue 41, red team: a right loop was refused with "0 clips")."""
    original = torch.nn.utils.clip_grad.clip_grad_norm_

    def clip_grad_norm_(parameters: Any, max_norm: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)
        return record(parameters, max_norm, lambda: original(parameters, max_norm, *args, **kwargs))

    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_
    split = getattr(torch.nn.utils, "clip_grads_with_norm_", None)
    if split is None:  # torch before 2.6: clip_grad_norm_ is the only public clip by norm
        return

    def clip_grads_with_norm_(
        parameters: Any, max_norm: Any, total_norm: Any, *args: Any, **kwargs: Any
    ) -> None:
        # the second half of clip_grad_norm_ (torch's public name; clip_grad_norm_ itself calls
        # the private one, so a clip is never counted twice): the norm it saw is the one handed
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)

        def clip() -> Any:
            split(parameters, max_norm, total_norm, *args, **kwargs)
            return total_norm

        record(parameters, max_norm, clip)

    torch.nn.utils.clip_grads_with_norm_ = clip_grads_with_norm_


class Unavailable(RuntimeError):
    """A public PyTorch feature this grader cannot offer; the message names the limit plainly
    (in English, in the learner's traceback) and ``limit`` says which, for the verdict's text in
    the learner's language (``error.unavailable_<limit>`` in messages.yaml)."""

    def __init__(self, limit: str, text: str) -> None:
        super().__init__(text)
        self.limit = limit


COMPILE = (
    "torch.compile is not available in the grader: it compiles in worker threads and processes, "
    "which the sandbox does not start. Run your loop without it here (it computes the same "
    "numbers) and compile it on your own machine."
)
TRANSFORMS = (
    "torch.func's grad, vjp, jacrev and hessian are not available in this exercise's grader: "
    "they refuse to run under saved-tensor hooks, and the grader measures the memory saved for "
    "backward with them. Take the gradients with loss.backward() here."
)


PROFILER = (
    "torch.profiler is not available in this exercise's grader: the profiler starts a thread, and "
    "this grader runs your loop on a single thread so that it can count every byte saved for "
    "backward. Take the profiler out here (record_function labels may stay); lesson 3's "
    "exercises run it."
)
THREADS = (
    "This exercise's grader runs your loop on a single thread and in a single process, so that it "
    "can count every byte saved for backward: starting a thread or a process is refused here. "
    "Run the loop without them."
)


PROCESSES = (
    "This exercise's grader runs your loop in a single process, so that the system's count of its "
    "memory is all of it: starting a process is refused here (threads may run). Run the loop "
    "without one."
)


def name_limits(alone: bool = False, kernel: bool = False) -> None:
    """In the learner's process, before its file is imported: ``torch.compile`` raises
    ``Unavailable`` (its compiler's threads and processes are refused). With ``alone`` (the child
    of a kind that may start no thread or process: ``runtime.Api.alone``), ``torch.profiler`` and
    a thread or process started from Python raise ``Unavailable`` too, instead of "Operation not
    permitted" from the profiler's C++ thread or "can't start new thread"; and torch.func's
    transforms raise it where hooks are on (a memory meter's), instead of "don't yet support saved
    tensor hooks".

    ``kernel``: the kind's memory is graded from the kernel's count of the process (a memory
    run), so its in-process meters only name mistakes: torch.func's transforms run with the
    meters' hooks set aside (what they save is the transform's own, for the call), and threads
    may run (the profiler's among them); a process, which the kernel counts apart, is still
    refused (``childfilter.PROCESSES``, loaded by the kind)."""

    def compile(*args: Any, **kwargs: Any) -> NoReturn:  # noqa: A001 (the name the learner calls)
        raise Unavailable("compile", COMPILE)

    torch.compile = compile
    graph = torch.autograd.graph
    disable = graph.disable_saved_tensors_hooks

    @contextlib.contextmanager
    def disable_saved_tensors_hooks(error_message: str) -> Iterator[None]:
        if kernel:
            with _meters_set_aside(), disable(error_message):
                yield
            return
        if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
            raise Unavailable("transforms", TRANSFORMS)
        with disable(error_message):
            yield

    functools.update_wrapper(disable_saved_tensors_hooks, disable)
    graph.disable_saved_tensors_hooks = disable_saved_tensors_hooks
    if alone and kernel:
        _refuse_processes()
    elif alone:
        _refuse_threads()


@contextlib.contextmanager
def _meters_set_aside() -> Iterator[None]:
    """The saved-tensor hooks on top of this thread's stack, while they are a memory meter's
    (``memory.SavedTensorMeter``), popped for the duration and pushed back after; hooks of the
    program's own stay, and torch refuses the transform under them as it would anywhere."""
    from . import memory  # a leaf module too; imported here, where a kind meters

    packs = {meter._pack for meter in memory._on()}
    autograd = torch._C._autograd
    popped = []
    top = autograd._top_saved_tensors_default_hooks(False)
    while top is not None and top[0] in packs:
        popped.append(top)
        autograd._pop_saved_tensors_default_hooks()
        top = autograd._top_saved_tensors_default_hooks(False)
    try:
        yield
    finally:
        for pack, unpack in reversed(popped):
            autograd._push_saved_tensors_default_hooks(pack, unpack)


def _refuse_processes() -> None:
    """``os.fork`` raises ``Unavailable`` with the limit named; the filter refuses it anyway."""

    def processes(*args: Any, **kwargs: Any) -> NoReturn:
        raise Unavailable("processes", PROCESSES)

    os.fork = processes


def _refuse_threads() -> None:
    """The profiler (``torch.profiler.profile`` and the autograd profiler under it, which start
    Kineto's thread as they prepare and start a trace), ``threading.Thread.start`` and
    ``os.fork`` raise ``Unavailable`` with the limit named; the filter refuses them anyway."""

    def profiler(*args: Any, **kwargs: Any) -> NoReturn:
        raise Unavailable("profiler", PROFILER)

    def threads(*args: Any, **kwargs: Any) -> NoReturn:
        raise Unavailable("threads", THREADS)

    autograd_profile = torch.autograd.profiler.profile
    for name in ("_prepare_trace", "_start_trace", "__enter__"):
        if hasattr(autograd_profile, name):
            setattr(autograd_profile, name, profiler)
    kineto = torch.profiler.profiler._KinetoProfile
    for name in ("prepare_trace", "start_trace", "start"):
        if hasattr(kineto, name):
            setattr(kineto, name, profiler)
    threading.Thread.start = threads  # type: ignore[method-assign]  # the limit, named
    os.fork = threads
