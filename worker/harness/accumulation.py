"""Harness of the "accumulation" kind: runs the learner's training loop on a seeded
scenario and records what it did (docs/architecture.md, "The maths").

Recorded: the order of forwards (F), loss calls (L), backwards (B), zero_grad (Z),
optimizer steps (S), clipping (C) and GradScaler calls; the gradient at every step and
the parameters after it; the gradient every clip saw; each loss call's micro-batches and the
step it followed, for the checks' decomposition (which computes their unit gradients itself;
a call on targets of the learner's own gets its unit here, via autograd.grad on the
learner's graph); and peak bytes saved for backward.
"""

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from . import childfilter, memory, scenarios, sharing, supervise
from .instrument import flat, name_limits, patch_clip, watch_scaler, wrap_method, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_EVENTS = 4000
MAX_STEPS = 64
MAX_CLIPS = 64
MAX_CALLS = 96

# the syncs around the learner's call, where the kernel's count of the process is read
MEMORY_START, MEMORY_END = "memory-start", "memory-end"

DEFAULT_SIGNATURE = ["model", "loader", "loss_fn", "optimizer", "accum_steps"]
WARM_ROWS = 4096  # the warm-up's batch: torch's code paged in as on a whole micro-batch


class Recorder:
    def __init__(self, model: torch.nn.Module, scaler: torch.amp.GradScaler | None) -> None:
        self.params = [p for p in model.parameters()]
        self.scaler = scaler
        self.events: list[list[Any]] = []
        self.events_dropped = 0
        self.steps: list[dict[str, Any]] = []
        self.steps_total = 0
        self.clips: list[dict[str, Any]] = []
        self.clips_total = 0
        self.calls: list[dict[str, Any]] = []
        self.seen: set[tuple[tuple[int, ...], int]] = set()
        self.forwards = 0
        self.backwards = 0
        # the saved-tensor meter, once the learner's call begins
        self.meter: memory.SavedTensorMeter | None = None
        self.unscaled = False  # GradScaler: unscale_ ran since the last update
        self.pending_grad: list[float | None] | None = None  # what the step about to run sees

    def event(self, *item: Any) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append(list(item))
        else:
            self.events_dropped += 1

    def grads(self) -> list[float | None]:
        return flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])

    def scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def check_meter(self) -> None:
        """A forward or a loss with gradients on: the meter must be the one saving."""
        if self.meter is not None and torch.is_grad_enabled():
            self.meter.check_on()


def _plain(tensor: Any) -> Any:
    """``tensor`` itself, or under a torch.func transform the tensor its wrappers hold (a
    wrapped tensor has no storage of its own to compare)."""
    functorch = torch._C._functorch
    while isinstance(tensor, torch.Tensor) and functorch.is_functorch_wrapped_tensor(tensor):
        tensor = functorch.get_unwrapped(tensor)
    return tensor


def _transformed(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(tensor)


def _identify(batches: Sequence[scenarios.Batch], y: Any) -> list[int]:
    """Indices of the micro-batches whose targets make up ``y`` (consecutive), or []."""
    y = _plain(y)
    if not isinstance(y, torch.Tensor) or y.dim() == 0:
        return []
    for i, (_, yi) in enumerate(batches):
        if yi.data_ptr() == y.data_ptr() and (yi.shape == y.shape or _same_elements(yi, y)):
            return [i]
    rows = y.shape[0]
    for start in range(len(batches)):
        total, end = 0, start
        while end < len(batches) and total < rows:
            total += batches[end][1].shape[0]
            end += 1
        if total != rows or batches[start][1].shape[1:] != y.shape[1:]:
            continue
        joined = torch.cat([b[1] for b in batches[start:end]]).to(y.device)
        if torch.equal(joined, y):
            return list(range(start, end))
    return []


def _same_elements(batch: torch.Tensor, y: torch.Tensor) -> bool:
    """``y`` is a micro-batch's target reshaped (``y.view(-1)`` beside ``logits.view(-1, V)``):
    the same elements in the same order, so the same call's loss and unit gradient."""
    return (
        y.dtype == batch.dtype and y.numel() == batch.numel() and y.is_contiguous() and batch.is_contiguous()
    )


def _own_gradients(objective: torch.Tensor, params: Sequence[torch.Tensor]) -> Sequence[torch.Tensor | None]:
    """The gradient of ``objective`` on the learner's graph, without the hooks the learner put
    on the parameters (``p.register_hook``: a gradient divided there is still the micro-batch's
    own gradient here, which the checks' decomposition needs unchanged)."""
    hooked = [(p._backward_hooks, dict(p._backward_hooks)) for p in params if p._backward_hooks]
    for table, _ in hooked:
        table.clear()
    try:
        return torch.autograd.grad(objective, params, retain_graph=True, allow_unused=True)
    finally:
        for table, hooks in hooked:
            table.update(hooks)


class RecordingLoss:
    """Wraps the scenario's loss: computes each call's unit gradient on the learner's graph."""

    def __init__(self, scenario: scenarios.Scenario, recorder: Recorder) -> None:
        self._scenario = scenario
        self._rec = recorder
        self._signature = inspect.signature(scenario.loss_fn.forward)  # once, not at every call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scenario.loss_fn, name)

    def _target(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's second argument, the target, however it was passed: ``loss_fn(out, y)``,
        ``loss_fn(input=out, target=y)``, ``loss_fn(out, targets=y)`` (the wrapped loss's own
        names; a learner's right loop used them and was refused)."""
        second = list(self._signature.parameters)[1]
        return self._signature.bind(*args, **kwargs).arguments[second]

    def _unit(self, loss: torch.Tensor, target: Any) -> list[float | None]:
        """The gradient of the call's own mean loss on the learner's graph (inside torch.func
        the graph is the transform's, not the parameters': none, and no diagnosis)."""
        params = self._rec.params
        grads: Sequence[torch.Tensor | None] = [None] * len(params)
        if not _transformed(loss):
            grads = _own_gradients(self._scenario.unit_objective(loss, target), params)
        return flat([g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params, strict=True)])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        loss = self._scenario.loss_fn(*args, **kwargs)  # by position or by its own keywords
        target = self._target(args, kwargs)
        rec = self._rec
        mbs = _identify(self._scenario.micro_batches, target)
        # one micro-batch's target, reshaped or not: counted by that target's own shape
        counted = self._scenario.micro_batches[mbs[0]][1] if len(mbs) == 1 else target
        index = -1
        if torch.is_grad_enabled() and isinstance(loss, torch.Tensor) and loss.requires_grad:
            key = (tuple(mbs), rec.steps_total)
            if (not mbs or key not in rec.seen) and len(rec.calls) < MAX_CALLS:
                rec.seen.add(key)
                index = len(rec.calls)
                rec.calls.append(
                    {
                        "mbs": mbs,
                        "n": self._scenario.weight(counted),
                        "positions": self._scenario.positions(counted),
                        "after_step": rec.steps_total,
                        # a call on micro-batches of the scenario: the checks compute its unit
                        # gradient themselves, where a mistake is to be named (a backward's
                        # work, 40 % of a right loop's, saved); on targets of the loop's own,
                        # the unit on its graph, here
                        "unit": None if mbs else self._unit(loss, target),
                    }
                )
        rec.event("L", index, mbs)
        rec.check_meter()
        return loss


def _instrument(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    batches: list[scenarios.Batch],
    rec: Recorder,
    api: "Api",
) -> None:
    ptrs = {b[0].data_ptr(): i for i, b in enumerate(batches)}
    pending: list[list[Any]] = []  # the event of the forward under way, until its output is made

    def on_forward(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        rec.check_meter()
        recompute = torch._C._current_autograd_node() is not None  # checkpoint, in backward
        rec.forwards += not recompute
        x = _plain(args[0]) if args else None
        size = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() > 0 else -1
        index = ptrs.get(x.data_ptr(), -1) if isinstance(x, torch.Tensor) else -1
        rec.event("F", size, index, torch.is_grad_enabled(), recompute, False)
        pending[:] = rec.events[-1:] if rec.events_dropped == 0 else []

    def on_output(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        """The forward's event marks itself reached when a backward computes its output's
        gradient: a forward looked at and dropped (a logged loss with gradients on) is not one
        whose graph a backward joined to another's (``checks.accumulation._joined``)."""
        if not pending:
            return
        event = pending.pop()
        if isinstance(output, torch.Tensor) and output.requires_grad and not _transformed(output):
            output.register_hook(lambda grad, event=event: event.__setitem__(5, True))

    def on_backward(param: torch.Tensor) -> None:
        rec.backwards += 1
        rec.event("B")

    # on the first layer, which takes the batch itself: ``model.forward(x)``, called directly,
    # runs no hook of the model's own (red team 4: a forward counted 0 times dropped the line
    # that fails one backward per cycle)
    first = next(model.children())
    first.register_forward_pre_hook(on_forward)
    first.register_forward_hook(on_output)
    rec.params[0].register_post_accumulate_grad_hook(on_backward)

    def before_step() -> None:
        rec.event("S", rec.steps_total)
        rec.pending_grad = rec.grads()

    def after_step(result: object) -> None:
        if rec.steps_total < MAX_STEPS:
            rec.steps.append({"grad": rec.pending_grad, "params": flat(rec.params), "scale": rec.scale()})
        api.sync("step", rec.steps_total, snapshot=True)  # the supervisor reads the parameters
        rec.steps_total += 1

    wrap_step(optimizer, before_step, after_step)

    def zero(who: str) -> Callable[..., None]:
        def before(*args: Any, **kwargs: Any) -> None:
            rec.event("Z", who)

        return before

    wrap_method(optimizer, "zero_grad", zero("optimizer"))
    wrap_method(model, "zero_grad", zero("model"))
    if scaler is not None:
        # each call a sync the supervisor counts: the scaler check rests on its counts
        watch_scaler(scaler, rec, sync=lambda code: api.sync(code))

    def on_clip(parameters: Any, max_norm: Any, clip: Callable[[], Any]) -> Any:
        # the gradient before it is clipped
        rec.event("C", rec.clips_total)
        if rec.clips_total < MAX_CLIPS:
            rec.clips.append(
                {
                    "grad": rec.grads(),
                    "max_norm": float(max_norm),
                    "after_step": rec.steps_total,
                    "unscaled": rec.unscaled if scaler is not None else None,
                }
            )
        rec.clips_total += 1
        return clip()

    patch_clip(on_clip)


def _scaler(params: dict[str, Any], device: str) -> torch.amp.GradScaler:
    """The exercise's GradScaler (``params["scaler"]``), as it starts."""
    return torch.amp.GradScaler(
        torch.device(device).type,
        init_scale=float(params["scaler"]["init_scale"]),
        growth_interval=int(params["scaler"]["growth_interval"]),
    )


def _warm_up(
    scenario: scenarios.Scenario, batch: scenarios.Batch, params: dict[str, Any], device: str
) -> None:
    """What the run does, once, on a copy of the scenario's model and one of its micro-batches,
    in the child before the supervisor watches its memory: a forward, a unit gradient (the
    recording's ``autograd.grad``), a backward, a clip, a GradScaler's calls and a step. Torch's
    code that such a loop runs is paged in and its lazy state made here, not counted as the
    learner's (hookstep measured 22 MiB of the process's pages at a first backward); what it
    allocates is freed before the watch (``exact_malloc``: freed blocks go back to the kernel)."""
    model = copy.deepcopy(scenario.model)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    scaler = _scaler(params, device) if params.get("scaler") else None
    with memory.SavedTensorMeter(weights):
        loss = scenario.loss_fn(model(batch[0]), batch[1])
        _own_gradients(scenario.unit_objective(loss, batch[1]), weights)
        objective = scenario.unit_objective(loss, batch[1])
        (scaler.scale(objective) if scaler is not None else objective).backward()
    if scaler is not None:
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(weights, 1.0)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del loss, objective, model, weights, optimizer


def prepare(params: dict[str, Any], dtype: torch.dtype) -> "sharing.Layout":
    """The supervisor's part, device-free: the layout of the parameters the child's set-up will
    hand over, from the scenario's model built on the CPU without its micro-batches (a few
    hundred bytes: nothing the child inherits weighs in its memory's figures)."""
    probe = scenarios.build({**params, "n_micro": 0}, dtype)
    return sharing.layout(probe.model.parameters())


def run(job: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it will read); the child builds the
    scenario (``set_up``, before the learner's file is loaded), hands its parameters over and
    runs the learner's loop (``learner``). One run, graded for its numbers and its memory alike
    (issue 41): a loop cannot behave one way where the parameters are compared and another where
    memory is counted. Where the exercise says so (``params["kernel_memory"]``) its micro-batches
    are large enough that the kernel's count of the process tells one micro-batch's activations
    alive from a whole cycle's, and the supervisor reads that count from before the learner's
    file loads (``supervise.WATCH``) and around the call (``memory-start``, ``memory-end``)."""
    params = job["params"]
    dtype = getattr(torch, params.get("dtype", "float64"))
    device = job.get("device", "cpu")
    counted = bool(params.get("kernel_memory"))
    layout = prepare(params, dtype)
    # where the kernel's count grades memory, the meter only names mistakes, so the child may
    # start threads (the profiler's), never a process, which the kernel would count apart;
    # elsewhere the meter is what memory rests on: one thread
    processes = childfilter.prepare_processes() if counted else None

    def set_up() -> tuple[Any, ...]:
        """The child's, before any of the learner's code: the seeded scenario on ``device``,
        its parameters handed to the supervisor."""
        if counted:
            supervise.exact_malloc()  # before the scenario's tensors: the kernel's count follows them
        scenario = scenarios.build(params, dtype)
        model = scenario.model.to(device)
        batches = [(x.to(device), y.to(device)) for x, y in scenario.micro_batches]
        scenario.micro_batches = batches
        optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
        scaler = _scaler(params, device) if params.get("scaler") else None
        rec = Recorder(model, scaler)
        initial = flat(rec.params)
        api.hand_off(rec.params)
        return scenario, model, batches, optimizer, scaler, rec, initial

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        scenario, model, batches, optimizer, scaler, rec, initial = set_up()
        forked = processes is not None and not api.inline
        if processes is not None and forked:
            childfilter.stack(processes)
        if counted:  # the code a loop runs is the same on a slice of a micro-batch
            _warm_up(scenario, (batches[0][0][:WARM_ROWS], batches[0][1][:WARM_ROWS]), params, device)
        _instrument(model, optimizer, scaler, batches, rec, api)
        available = {
            "model": model,
            "loader": scenarios.Loader(batches),
            "loss_fn": RecordingLoss(scenario, rec),
            "optimizer": optimizer,
            "accum_steps": int(params["accum_steps"]),
            "scaler": scaler,
            "max_norm": params.get("max_norm"),
        }
        names = params.get("signature", DEFAULT_SIGNATURE)
        if counted:
            # the objects collected and frozen first: a collection of the learner's would copy
            # their pages and count them (exec start: a right loop calling gc.collect() read
            # 100 MiB from the load, 51 once settled)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, names)
        torch.manual_seed(int(params.get("seed", 0)) + 1)
        meter = rec.meter = memory.SavedTensorMeter(rec.params, api.meter_report())
        with meter:
            if counted:
                api.sync(MEMORY_START)
            error = api.call(fn, [available[name] for name in names])
            if counted:
                api.sync(MEMORY_END)
        data = {
            "initial_params": initial,
            "final_params": flat(rec.params),
            "events": list(rec.events),
            "events_dropped": rec.events_dropped,
            "steps": list(rec.steps),
            "steps_total": rec.steps_total,
            "clips": list(rec.clips),
            "clips_total": rec.clips_total,
            "calls": list(rec.calls),
            "forwards": rec.forwards,
            "backwards": rec.backwards,
            "peak_saved_bytes": meter.peak,
            "final_scale": rec.scale(),
        }
        return data, error

    # without the kernel's count, the meter sees this thread of this process only
    return api.supervise(learner, alone=processes is None, layout=layout, device=device)
