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

The supervisor's part is device-free (``prepare``: the layout of the three models' parameters,
from their shapes on torch's meta device); the child builds them (``run``'s ``set_up``) and hands
their storage over (``Api.hand_off``) before the learner's file is loaded.
"""

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _python_dispatch
from torch.utils.checkpoint import checkpoint

from . import memory, scenarios, sharing, supervise
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


def _empty(sized: dict[str, Any], device: str) -> scenarios.BlockNet:
    """The release run's model, its storage not yet written (``to_empty``: pages the process
    has never touched, which its resident set does not count)."""
    with torch.device("meta"):
        model = scenarios.block_net({**sized, "n_batches": 0})[0]
    return model.to_empty(device=device)


def _draw(model: scenarios.BlockNet, sized: dict[str, Any], device: str, inline: bool) -> Big:
    """The release run's model and batch as ``scenarios.block_net(sized)`` draws them, drawn
    into ``model``'s handed-over storage a layer at a time (each ``Linear`` as that model's
    constructor draws it, in float32, then widened), each weight's pages dropped from the
    process's page tables once written (``sharing.drop_pages``): the child's memory holds one
    layer more at most, and its high-water mark as the supervisor begins to watch it is
    not the 36 MiB of weights it never holds until ``_touch``."""
    torch.manual_seed(int(sized.get("seed", 0)))
    with torch.no_grad():
        for layer in (m for m in model.modules() if isinstance(m, torch.nn.Linear)):
            drawn = torch.nn.Linear(layer.in_features, layer.out_features)
            layer.weight.copy_(drawn.weight)
            layer.bias.copy_(drawn.bias)
            del drawn
            if not inline:  # forked on the CPU: in the hand-off's memory files
                sharing.drop_pages([layer.weight])
    dtype = next(model.parameters()).dtype
    x = torch.randn(int(sized["batch_size"]), int(sized["width"]), dtype=dtype)
    y = torch.randint(0, model.head.out_features, (int(sized["batch_size"]),))
    return model, x.to(device), y.to(device)


def _models(params: dict[str, Any]) -> list[scenarios.BlockNet | None]:
    """The three models' shapes (the calls', the budget run's, the release run's; None where
    the exercise has no such run), built on torch's meta device: nothing drawn, nothing held."""
    with torch.device("meta"):
        return [
            scenarios.block_net({**sized, "n_batches": 0})[0] if sized is not None else None
            for sized in (params, scenarios.memory_params(params), scenarios.release_params(params))
        ]


def _read(
    model: scenarios.BlockNet, big: scenarios.BlockNet | None, release: scenarios.BlockNet | None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """What the supervisor reads, in the hand-off's order: whole, the calls' parameters, the
    budget run's, then the release run's biases; at places it draws (``Read``), the release
    run's weights (2 MiB each, 36 MiB in all, would not fit in a trace)."""
    whole: list[torch.Tensor] = [*model.parameters(), *(big.parameters() if big is not None else [])]
    whole += _linears(release, "bias") if release is not None else []
    return whole, _linears(release, "weight") if release is not None else []


def prepare(params: dict[str, Any]) -> tuple["sharing.Layout", int]:
    """The supervisor's part, device-free: the layout of the parameters the child's set-up hands
    over (``_read``'s order, from the models' shapes alone: the release run's 36 MiB of weights
    are not drawn here) and how many of them ``Read`` reads whole."""
    model, big, release = _models(params)
    assert model is not None  # the calls' model: always
    whole, sampled = _read(model, big, release)
    return sharing.layout([*whole, *sampled]), len(whole)


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it will read, through ``Read``); the
    child builds the three models and their batches (``set_up``, before the learner's file is
    loaded), hands their parameters over and runs the learner's step (``learner``). The
    supervisor reads the parameters before every call and at the end (plain SGD: the step it saw
    is the gradient times the learning rate) and keeps each call's meter peak as the counts
    come."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    watched = scenarios.memory_params(params) is not None
    layout, whole = prepare(params)

    def set_up() -> tuple[Any, ...]:
        """The child's, before any of the learner's code. The release run's weights are handed
        over last and leave the child's page tables once copied (``Api.hand_off``'s
        ``dropped``): the child holds them again only once ``_touch`` reads them, after the
        budget's run, which so counts none of them (``_touch``)."""
        if watched:  # the memory runs' models and batches: the kernel's figures go by them
            supervise.exact_malloc()
        model, batches, loss_fn = scenarios.block_net(params)
        model = model.to(device)
        batches = [(x.to(device), y.to(device)) for x, y in batches]
        big = _big(scenarios.memory_params(params), device)
        sized = scenarios.release_params(params)
        wide = _empty(sized, device) if sized is not None else None
        read, sampled = _read(model, big[0] if big else None, wide)
        api.hand_off([*read, *sampled], dropped=len(sampled))
        release = _draw(wide, sized, device, api.inline) if wide is not None and sized is not None else None
        return model, batches, loss_fn, big, release

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, batches, loss_fn, big, release = set_up()
        weights = list(model.parameters())
        optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
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

    reading = functools.partial(Read, whole=whole)
    return api.supervise(learner, alone=True, layout=layout, device=device, reading=reading)


def _linears(model: scenarios.BlockNet, name: str) -> list[torch.Tensor]:
    """The ``weight`` or ``bias`` of each of ``model``'s layers, in order (the release run's
    biases are what the supervisor reads of it)."""
    return [getattr(m, name) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _touch(weights: list[torch.Tensor]) -> None:
    """In the child, after the budget's run and before the release run: the release model's
    weights read through, so that the hand-off's memory files they live in are in the child's
    page tables before the run's start (the checks' ``release_check`` lets the reading from the
    file's load hold their bytes). Until then the child does not hold those pages: the set-up
    drew them a layer at a time and dropped each from its page tables once written (``_draw``),
    so the budget's run counts none of them, and a step cannot free them to lower its figure.

    Why in the hand-off's files (issue 41, red team 4): made in the child's own pages, a step
    that kept its gradients past the step and freed the model's own weights as it ended
    (``p.data = torch.empty(0)``, the storage resized to 0) left 1.2-1.4 MiB more than it began
    with, as a right step does, where its 36 MiB of gradients stayed. The files' pages stay
    while the supervisor maps them: a step rebinding ``p.data`` leaves them in the child's
    resident set (the child's mappings are held for its life, ``sharing``), one that unmaps
    them leaves them in the job's cgroup; and the supervisor reads the weights there after the
    step (``Read``): a step trained on weights of its own leaves them where they began."""
    with torch.no_grad():
        for weight in weights:
            weight.sum()


class Read(supervise.Shared):
    """The run's tensors as the supervisor reads them at each snapshot (the child's hand-off,
    ``_read``'s order): ``[whole…, seed, sampled…]``: every value of the first ``whole``
    tensors, then the seed of the places it read of the others, ``sampled``
    (``hookstep.places``, ``SAMPLES`` of each), then the values there. The seed comes from the
    operating system's randomness at the first snapshot, in the supervisor (the learner's
    process, forked before, never holds it). With nothing ``sampled``, the values alone, as
    ``Shared`` reads them. Made by the observer over its read-only views of the hand-off
    (``mapped``), or inline on CUDA over the tensors themselves (``Api.supervise``'s
    ``reading``)."""

    SAMPLES = 64  # of each weight: 19 × 64 values a snapshot (the blocks' 18 layers and the head)

    def __init__(self, tensors: list[torch.Tensor], mapped: bool = False, whole: int = 0) -> None:
        super().__init__(tensors, mapped)
        self.whole = whole
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
