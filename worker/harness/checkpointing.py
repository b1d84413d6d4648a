"""Harness of the "checkpointing" kind (lesson 4): the learner's ``train_step`` must fit a
memory budget (activation checkpointing) while computing the same gradients.

``train_step(model, x, y, loss_fn, optimizer)`` runs once per batch on a seeded float64
``BlockNet``. Recorded: the peak bytes of live tensors during each call (every tensor an
op creates, recomputation included; parameters left out), the gradient at every optimizer
step, whether gradients were still held after each call, and the order of block forwards
(F, with whether backward was running: a recomputation) and of gradients reaching each
block (G).

Then, where the exercise has them, two memory runs, each between two syncs where the supervisor
reads parameters and the kernel's figures of the process's memory: the budget's (one large batch
on a fresh model: its peak) and the release's (a model of wide layers and a small batch: what the
process still holds once the step returned, its gradients tens of MiB).
"""

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _python_dispatch
from torch.utils.checkpoint import checkpoint

from . import memory, scenarios, supervise
from .hookstep import places
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_EVENTS = 2000

# a memory run's model and its one batch: (model, x, y)
Big = tuple[scenarios.BlockNet, torch.Tensor, torch.Tensor]


def _backward_running() -> bool:
    return torch._C._current_autograd_node() is not None


def _big(params: dict[str, Any] | None, device: str) -> Big | None:
    if params is None:
        return None
    model, [(x, y)], _ = scenarios.block_net(params)
    return model.to(device), x.to(device), y.to(device)


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The model is built here, in the supervisor, and its parameters shared; the rest runs in
    the child (``learner``). The supervisor reads the parameters before every call and at the
    end (plain SGD: the step it saw is the gradient times the learning rate) and keeps each
    call's meter peak as the counts come."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    model, batches, loss_fn = scenarios.block_net(params)
    model = model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    watched = scenarios.memory_params(params) is not None
    if watched:  # the memory runs' models and batches: the kernel's figures go by them
        supervise.exact_malloc()
    big = _big(scenarios.memory_params(params), device)
    release = _big(scenarios.release_params(params), device)
    # read whole: the calls' parameters, the budget run's, then the release run's biases; the
    # release run's weights (2 MiB each, 36 MiB in all, would not fit in a trace) at places the
    # supervisor draws (``Read``). All of them in the supervisor's mapping, made before the fork
    whole = weights + (list(big[0].parameters()) if big is not None else [])
    whole += _linears(release[0], "bias") if release is not None else []
    # THE OLD PATH, left to convert (issue 42; docs/architecture.md, "One flow for both
    # devices"): this kind's set-up runs here in the supervisor and its parameters go into a
    # mapping made before the fork; converted kinds build in the child and hand over (``sharing``)
    api._shared = Read(whole, _linears(release[0], "weight") if release is not None else [])

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        events: list[list[Any]] = []
        steps: list[dict[str, Any]] = []

        def event(*item: Any) -> None:
            if len(events) < MAX_EVENTS:
                events.append(list(item))

        for index, block in enumerate(model.blocks):
            block.register_forward_pre_hook(lambda m, a, index=index: event("F", index, _backward_running()))
            next(block.parameters()).register_post_accumulate_grad_hook(
                lambda p, index=index: event("G", index)
            )

        def recorded_step() -> None:
            event("S")
            with _python_dispatch._disable_current_modes():  # the copy is ours: not metered
                steps.append(
                    {
                        "grad": flat(
                            [p.grad if p.grad is not None else torch.zeros_like(p) for p in weights]
                        ),
                        "missing": [i for i, p in enumerate(weights) if p.grad is None],
                    }
                )

        wrap_step(optimizer, recorded_step)
        if watched:
            _warm_up(params, loss_fn)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "x", "y", "loss_fn", "optimizer"])
        peaks: list[int] = []
        kept: list[int] = []
        error = None
        for x, y in batches:
            event("call")
            api.sync("call", len(peaks), snapshot=True)
            meter = memory.LiveTensorMeter(weights, api.meter_report(), inputs=(x, y))
            with meter:
                error = api.call(fn, [model, x, y, loss_fn, optimizer])
            peaks.append(meter.peak)
            kept.append(sum(p.grad is not None for p in weights))
            if error is not None:
                break
        lr = float(params["lr"])
        if big is not None and error is None:
            error = _memory_run(api, fn, big, loss_fn, lr, "memory")
        if release is not None and error is None:
            _touch(_linears(release[0], "weight"))
            error = _memory_run(api, fn, release, loss_fn, lr, "memory-release")
        data = {
            "peaks": peaks,
            "grads_kept": kept,
            "steps": steps,
            "events": events,
            "final_params": flat(weights),
            "blocks": len(model.blocks),
            "grad_bytes": sum(p.numel() * p.element_size() for p in weights),
        }
        return data, error

    return api.supervise(learner, alone=True)


def _linears(model: scenarios.BlockNet, name: str) -> list[torch.Tensor]:
    """The ``weight`` or ``bias`` of each of ``model``'s layers, in order (the release run's
    biases are what the supervisor reads of it)."""
    return [getattr(m, name) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _touch(weights: list[torch.Tensor]) -> None:
    """In the child, after the budget's run and before the release run: the release model's
    weights read through, so that the supervisor's mapping they live in is in the child's page
    tables before the run's start (the checks' ``release_check`` lets the reading from the
    file's load hold their bytes). Until then the child never touched those pages:
    the budget's run counts none of them, and a step cannot free them to lower its figure.

    Why in the mapping (issue 41, red team 4): made in the child's own pages, a step that kept
    its gradients past the step and freed the model's own weights as it ended (``p.data =
    torch.empty(0)``, the storage resized to 0) left 1.2-1.4 MiB more than it began with, as a
    right step does, where its 36 MiB of gradients stayed. The mapping's pages stay while the
    supervisor maps them: a step rebinding ``p.data`` leaves them in the child's resident set,
    one that unmaps them leaves them in the job's cgroup; and the supervisor reads the weights
    there after the step (``Read``): a step trained on weights of its own leaves them where
    they began."""
    with torch.no_grad():
        for weight in weights:
            weight.sum()


class Read(supervise.Shared):
    """The run's tensors in the shared mapping, read by the supervisor at each snapshot as
    ``[whole…, seed, sampled…]``: every value of ``whole``, then the seed of the places it read
    of ``sampled`` (``hookstep.places``, ``SAMPLES`` of each), then the values there. The seed
    comes from the operating system's randomness at the first snapshot, in the supervisor (the
    learner's process, forked before, never holds it). With nothing ``sampled``, ``whole``'s
    values alone, as ``Shared`` reads them."""

    SAMPLES = 64  # of each weight: 19 × 64 values a snapshot (the blocks' 18 layers and the head)

    def __init__(self, whole: list[torch.Tensor], sampled: list[torch.Tensor]) -> None:
        super().__init__([*whole, *sampled])
        self.whole = len(whole)
        self._seed: int | None = None
        self._places: list[torch.Tensor] = []

    def snapshot(self) -> list[float | None]:
        read = flat(self.views[: self.whole]) if self.whole else []
        sampled = self.views[self.whole :]
        if not sampled:
            return read
        if self._seed is None:
            self._seed = int.from_bytes(os.urandom(8), "little") >> 12  # a float holds it exactly
            self._places = places(self._seed, [v.numel() for v in sampled], self.SAMPLES)
        self.mirror()  # inline on CUDA: the tensors as they are now (a no-op on the CPU)
        values = [v.detach().reshape(-1)[own] for v, own in zip(sampled, self._places, strict=True)]
        return [*read, float(self._seed), *flat(values)]


def _warm_up(params: dict[str, Any], loss_fn: Callable[..., torch.Tensor]) -> None:
    """A naive and a checkpointed step on a small copy of the scenario, in the child before the
    supervisor watches its memory: torch's code that any step runs is paged in and its lazy
    state made here (measured: 27 MiB of the process's pages at the first call), so that what
    the learner's loop holds from before its memory run is its own (5 MiB in right loops)."""
    model, [(x, y)], _ = scenarios.block_net({**params, "batch_size": 8, "n_batches": 1})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for recompute in (False, True):
        h = x
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False) if recompute else block(h)
        loss_fn(model.head(h), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _memory_run(
    api: "Api", fn: Callable[..., Any], big: Big, loss_fn: Callable[..., torch.Tensor], lr: float, name: str
) -> dict[str, Any] | None:
    """``train_step`` once more, on one batch and a fresh model with a plain SGD, between two
    syncs (``<name>-start``, ``<name>-end``) where the supervisor reads the parameters and the
    kernel's figures of the process's memory (``Observer.watch``): what a pass on the budget
    (its peak) and on released gradients (what stays once the step returned) rests on. No
    meter."""
    model, x, y = big
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    api.sync(f"{name}-start", snapshot=True)
    error = api.call(fn, [model, x, y, loss_fn, optimizer])
    api.sync(f"{name}-end", snapshot=True)
    return error  # its meters see this thread of this process only
