"""Harness of the "measure" kind (lesson 4): the learner's loop, run on this worker's device
in several configurations, timed and metered.

``train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint)`` runs
over the whole loader once per configuration, each on a fresh copy of a seeded float32
``BlockNet``: float32 vs low-precision autocast (bfloat16 on every device), with and without
gradient accumulation (the same samples per optimizer step, in ``accum_steps`` micro-batches),
with and without activation checkpointing. Each configuration first runs one batch
unmeasured (one-time costs stay out). Recorded per configuration: optimizer steps,
wall time (CUDA synchronised before and after), the time of every optimizer step in
``ROUNDS`` timed runs (CUDA synchronised at each step; the grader's own reporting left out;
the rounds interleaved across the configurations, so that a slow moment of a shared machine
falls on all of them, not on one), samples, the peak memory of the run
(CUDA: ``torch.cuda.max_memory_allocated`` above what was allocated before the call; CPU:
the peak bytes of live tensors, ``memory.LiveTensorMeter``, in a second, unclocked run), the
dtypes the blocks' ``Linear`` layers computed in, and which blocks ran again during
backward (recomputations: where checkpointing is asked, every block but the last must). The
first timed run of each configuration trains a model some of whose parameters live in the
shared mapping (``graded``, ``read_of``): the supervisor reads them as the run ends (a
``config-end`` sync), and the checks hold them to float32's and autocast's arithmetic,
recomputed: what the precision check's pass rests on (issue 41: the probe's dtypes, in the
child, were rewritten through its hooks); the probe's records only name the mistake. Then
one correctness run: the accumulation configuration on the "accumulation" kind's float64
scenario, with the parameters after every optimizer step, for the large-batch reference the
checks hold.
"""

import copy
import functools
import gc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute_block

from . import memory, scenarios, sharing, supervise
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

# timed runs of each configuration: the first is the one the supervisor counts, the others only
# add step times (ROUNDS × 4 steps each: a median and a spread the noise of a shared CPU does not
# decide alone), at a few milliseconds a step on the CPU
ROUNDS = 3
MAX_STEP_TIMES = 256  # per configuration

# the memory runs (``params["memory_batch"]``): the configurations whose memory is graded, each
# once more on one large batch and a fresh float32 model: both at once first, the one that saves
# most (the kernel's high-water mark only rises: a run after another is measured over both, so
# the lowest comes first), then low precision, then checkpointing. Issue 41, red team 4: with
# the low-precision and the checkpointed runs alone, "all" rested on the probe's flags, which a
# program set through ``gc`` while it never checkpointed there
# name, low precision?, checkpoint?
MEMORY_RUNS = [("all", True, True), ("low", True, False), ("checkpoint", False, True)]

CONFIGS = [  # name, low precision?, accumulate?, checkpoint?
    ("fp32", False, False, False),
    ("low", True, False, False),
    ("accum", False, True, False),
    ("checkpoint", False, False, True),
    ("all", True, True, True),
]


class Blocks(nn.Module):
    """A model as ``blocks`` then ``head`` (what the learner's loop walks through), made of an
    existing ``Linear - Tanh - Linear`` model's own modules: same parameters, same order."""

    def __init__(self, mlp: nn.Sequential) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(mlp[0], mlp[1])])
        self.head = mlp[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def read_of(model: Any) -> list[torch.Tensor]:
    """What the supervisor reads of a configuration's model: its first ``Linear`` and its head
    (323 values of 3,315: a trace holds them at every snapshot). The head's update goes by every
    block's forward, the first layer's by every block's backward, so either shows the precision
    the whole model computed in (autocast to bfloat16 puts them 3.2-3.6e-3 of their travel from
    float32's; float32 loops land within 1.6e-7)."""
    return [*model.blocks[0][0].parameters(), *model.head.parameters()]


def keep_dtype(model: nn.Module) -> None:
    """The correctness run's model stays in float64, in the memory the supervisor reads, whatever
    dtype the loop casts it to (``model.float()``, ``.to(precision)``: float32 master weights
    are a habit worth keeping): a cast of its floating tensors moves them across devices only,
    and floating inputs of every module are taken to float64. Its reference is float64."""
    dtype = next(model.parameters()).dtype

    def apply(
        module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> nn.Module:
        def moved_only(t: torch.Tensor) -> torch.Tensor:
            out = fn(t)
            if t.is_floating_point() and out.dtype != t.dtype:
                return t if out.device == t.device else out.to(t.dtype)
            return out

        return type(module)._apply(module, moved_only, recurse)

    def inputs(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        floating = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
        return tuple(a.to(dtype) if f else a for a, f in zip(args, floating, strict=True))

    for module in model.modules():
        module._apply = functools.partial(apply, module)  # type: ignore[method-assign]
        module.register_forward_pre_hook(inputs)


def low_precision(device: str) -> torch.dtype:
    """The low precision the loop autocasts to: bfloat16 on every device. float16 would need a
    GradScaler the loop is not handed (a passing loop reused on such a GPU would train float16
    unscaled); on a GPU without native bfloat16 (compute capability below 8.0) its rows measure
    torch's slower bfloat16 path, which the figures then show."""
    return torch.bfloat16


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Probe:
    """Hooks on a model copy: the dtypes its Linear layers computed in and their weights held,
    recomputed blocks, and whether a gradient reached the blocks."""

    def __init__(self, model: Any) -> None:
        self.dtypes: set[str] = set()
        self.weights: set[str] = set()
        self.recomputed, self.trained = False, False
        self.blocks = len(model.blocks)
        self.recomputed_blocks: set[int] = set()  # which blocks ran again in backward
        for number, block in enumerate(model.blocks):
            block.register_forward_pre_hook(functools.partial(self._block, number))
            next(block.parameters()).register_post_accumulate_grad_hook(self._trained)
            for layer in block.modules():
                if isinstance(layer, nn.Linear):
                    layer.register_forward_hook(self._linear)

    def _block(self, number: int, module: nn.Module, args: tuple[Any, ...]) -> None:
        if torch._C._current_autograd_node() is not None:
            self.recomputed = True
            self.recomputed_blocks.add(number)

    def _trained(self, param: torch.Tensor) -> None:
        self.trained = True

    def _linear(self, module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
        self.dtypes.add(str(out.dtype).replace("torch.", ""))
        self.weights.add(str(module.weight.dtype).replace("torch.", ""))


def micro_batches(batches: list[scenarios.Batch], accum: int) -> list[scenarios.Batch]:
    return [
        (x[i : i + len(x) // accum], y[i : i + len(x) // accum])
        for x, y in batches
        for i in range(0, len(x), len(x) // accum)
    ]


class Clock:
    """The wall time of each optimizer step of one run, in ms: from the start of the run or the
    end of the previous step's bookkeeping to the end of this step's update (CUDA synchronised
    there), so the grader's own work at a step (counting it, telling the supervisor) is left out."""

    def __init__(self, device: str) -> None:
        self.device, self.mark = device, time.perf_counter()
        self.times: list[float] = []

    def resume(self) -> None:
        self.mark = time.perf_counter()

    def lap(self) -> None:
        _sync(self.device)
        if len(self.times) < MAX_STEP_TIMES:
            self.times.append(round((time.perf_counter() - self.mark) * 1000, 4))


class Counted:
    """An SGD optimizer whose steps are counted (and, if asked, the parameters recorded), each
    step told to the supervisor through ``sync`` when given, and timed by ``clock`` if given."""

    def __init__(
        self,
        model: nn.Module,
        lr: float,
        record: bool = False,
        sync: Callable[[], object] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.steps = 0
        self.trajectory: list[list[float | None]] = []

        def counted(result: object) -> None:
            if clock is not None:
                clock.lap()
            self.steps += 1
            if record:
                self.trajectory.append(flat(model.parameters()))
            if sync is not None:
                sync()
            if clock is not None:
                clock.resume()

        wrap_step(self.optimizer, after=counted)


def prepare(params: dict[str, Any]) -> "sharing.Layout":
    """The supervisor's part, device-free: the layout of what the child's set-up hands over
    (``set_up``'s order), of the models built on the CPU without their batches (BlockNets a few
    KiB wide: nothing the child inherits weighs in its memory's figures)."""
    ref = params["reference"]
    checked = Blocks(scenarios.build({**ref, "n_micro": 0}, torch.float64).model)
    base, _, _ = scenarios.block_net({**params, "n_batches": 0}, torch.float32)
    sized = scenarios.memory_params(params)
    big: list[torch.Tensor] = []
    if sized is not None:
        big = list(scenarios.block_net({**sized, "n_batches": 0}, torch.float32)[0].parameters())
    return sharing.layout(
        [
            *checked.parameters(),
            *(p for _ in (MEMORY_RUNS if big else []) for p in big),
            *(p for _ in CONFIGS for p in read_of(base)),
        ]
    )


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it will read); the child builds the
    models (``set_up``, before the learner's file is loaded), hands over the correctness run's
    parameters and what the supervisor reads of the others, and runs the rest (``learner``).
    The supervisor counts each timed configuration's steps, reads the correctness run's
    parameters after every step and keeps each metered run's peak (CPU) as the counts come."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    layout = prepare(params)

    def set_up() -> tuple[Any, ...]:
        base, batches, loss_fn = scenarios.block_net(params, torch.float32)
        base = base.to(device)
        batches = [(x.to(device), y.to(device)) for x, y in batches]
        scenario = scenarios.build(params["reference"], torch.float64)
        checked = Blocks(scenario.model).to(device)
        sized = scenarios.memory_params(params)
        big: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        if sized is not None:  # the memory runs' models and batch: the kernel's figures go by them
            supervise.exact_malloc()
            model, [(x, y)], _ = scenarios.block_net(sized, torch.float32)
            big = [(copy.deepcopy(model).to(device), x.to(device), y.to(device)) for _ in MEMORY_RUNS]
        # each configuration's first timed run trains one of these (``_configurations``)
        graded = [copy.deepcopy(base) for _ in CONFIGS]
        # the memory runs' parameters after the correctness run's, then the configurations' (the
        # checks part them)
        api.hand_off(
            [
                *checked.parameters(),
                *(p for m, _, _ in big for p in m.parameters()),
                *(p for m in graded for p in read_of(m)),
            ]
        )
        keep_dtype(checked)
        return base, batches, loss_fn, scenario, checked, big, graded

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        base, batches, loss_fn, scenario, checked, big, graded = set_up()
        ref = params["reference"]
        if big:
            rows = len(batches[0][1])
            _warm_up(
                base, batches[0], loss_fn, low_precision(device), (rows, rows // int(params["accum_steps"]))
            )
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone)
        fn = api.load_entry()
        # the configuration goes by keyword: the four positional arguments are what is checked
        api.check_signature(
            functools.partial(fn, precision=torch.float32, accum_steps=1, checkpoint=False),
            ["model", "loader", "loss_fn", "optimizer"],
        )
        data, error = _configurations(spec, api, fn, base, batches, loss_fn, graded)
        if error is not None:
            return data, error
        for (name, low_on, checkpoint), (model, x, y) in zip(MEMORY_RUNS if big else [], big, strict=True):
            optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
            kwargs: dict[str, Any] = {"precision": low_precision(device) if low_on else torch.float32}
            kwargs |= {"accum_steps": 1, "checkpoint": checkpoint}
            api.sync(f"memory-{name}-start")
            error = api.call(functools.partial(fn, **kwargs), [model, [(x, y)], loss_fn, optimizer])
            api.sync(f"memory-{name}-end", snapshot=True)
            if error is not None:
                return data, error
        counted = Counted(
            checked, float(ref["lr"]), record=True, sync=lambda: api.sync("reference-step", snapshot=True)
        )
        loader = [(x.to(device), y.to(device)) for x, y in scenario.micro_batches]
        kwargs = {"precision": torch.float32, "accum_steps": int(ref["accum_steps"]), "checkpoint": False}
        error = api.call(
            functools.partial(fn, **kwargs),
            [checked, scenarios.Loader(loader), scenario.loss_fn, counted.optimizer],
        )
        data["reference_run"] = {"steps": counted.trajectory, "final_params": flat(checked.parameters())}
        return data, error

    # its meters see this thread of this process only
    return api.supervise(learner, alone=True, layout=layout, device=device)


def _warm_up(
    base: Any, batch: scenarios.Batch, loss_fn: nn.Module, low: torch.dtype, sizes: tuple[int, ...]
) -> None:
    """A step in float32, one under autocast to ``low`` and one checkpointed, on a copy of the
    model and a few rows, in the child before the supervisor watches its memory: torch's code
    that the configurations run is paged in and its lazy state made here, so that what the
    learner's loop holds from before its memory runs is its own."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for rows in sizes:
        x, y = batch[0][:rows], batch[1][:rows]
        for low_on, recompute in ((False, False), (True, False), (False, True), (True, True)):
            with torch.autocast(x.device.type, dtype=low, enabled=low_on):
                h = x
                for block in model.blocks:
                    h = recompute_block(block, h, use_reentrant=False) if recompute else block(h)
                loss = loss_fn(model.head(h), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def _configurations(
    spec: "Spec",
    api: "Api",
    fn: Callable[..., Any],
    base: nn.Module,
    batches: list[scenarios.Batch],
    loss_fn: nn.Module,
    graded: list[nn.Module],
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Every configuration, warmed up, timed (and metered on the CPU): ``(data, error)``. The
    first timed run of configuration ``number`` trains ``graded[number]``, whose parameters the
    supervisor reads as it ends (the ``config-end`` sync)."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    cuda = device.startswith("cuda")
    low, k, lr = low_precision(device), int(params["accum_steps"]), float(params["lr"])

    def one(
        low_on: bool,
        accum_on: bool,
        checkpoint: bool,
        metered: bool,
        steps: int | None = None,
        sync: Callable[[], object] | None = None,
        number: int | None = None,
    ) -> tuple[Any, dict[str, Any] | None]:
        model = graded[number] if number is not None else copy.deepcopy(base)
        clock = Clock(device)
        probe, counted = Probe(model), Counted(model, lr, sync=sync, clock=clock)
        loader = micro_batches(batches[:steps], k if accum_on else 1)
        kwargs = {
            "precision": low if low_on else torch.float32,
            "accum_steps": k if accum_on else 1,
            "checkpoint": checkpoint,
        }
        args = [model, scenarios.Loader(loader), loss_fn, counted.optimizer]
        if metered:
            given = [t for batch in loader for t in batch]
            with memory.LiveTensorMeter(model.parameters(), api.meter_report(), inputs=given) as meter:
                error = api.call(functools.partial(fn, **kwargs), args)
            return meter.peak, error
        gc.collect()  # earlier copies (the wrapped step makes a cycle) are freed now, not mid-run
        if cuda:
            _sync(device)
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        gc.disable()  # no collection of the loop's garbage inside the timed run
        try:
            started = time.perf_counter()
            clock.resume()
            error = api.call(functools.partial(fn, **kwargs), args)
            _sync(device)
            seconds = time.perf_counter() - started
        finally:
            gc.enable()
        if number is not None:
            api.sync("config-end", number, snapshot=True)  # its parameters, read by the supervisor
        peak = torch.cuda.max_memory_allocated() - before if cuda else None
        return {
            "steps": counted.steps,
            "seconds": seconds,
            "samples": sum(len(y) for _, y in batches),
            "peak": peak,
            "dtypes": sorted(probe.dtypes),
            "weights": sorted(probe.weights),
            "recomputed": probe.recomputed,
            "recomputed_blocks": sorted(probe.recomputed_blocks),
            "blocks": probe.blocks,
            "blocks_trained": probe.trained,
            "micro_batch": len(loader[0][1]),
            "step_ms": clock.times,
        }, error

    # what exists now (torch, the models, the learner's module) is never garbage: the collections
    # before each timed run look at the runs' own objects only (milliseconds, not a tenth of a second)
    gc.collect()
    gc.freeze()
    configs, error = {}, None
    for number, (name, low_on, accum_on, checkpoint) in enumerate(CONFIGS):
        # warm-up on one batch: one-time costs (kernel choice, the backward thread's cuBLAS
        # workspace, autocast's first casts) stay out of the time and the peak
        _, error = one(low_on, accum_on, checkpoint, False, steps=1)
        if error is not None:
            break
        result, error = one(
            low_on,
            accum_on,
            checkpoint,
            False,
            sync=functools.partial(api.sync, "step", number),
            number=number,
        )
        if error is None and not cuda:
            result["peak"], error = one(low_on, accum_on, checkpoint, True)
        configs[name] = result
        if error is not None:
            break
    for _round in range(ROUNDS - 1 if error is None else 0):
        for name, low_on, accum_on, checkpoint in CONFIGS:
            again, error = one(low_on, accum_on, checkpoint, False)
            times = configs[name]["step_ms"]
            times += again["step_ms"][: MAX_STEP_TIMES - len(times)]
            if error is not None:
                break
        if error is not None:
            break
    data = {
        "device": device,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "low_precision": str(low).replace("torch.", ""),
        "accum_steps": k,
        "meter": "cuda" if cuda else "live",
        "configs": configs,
        "expected_steps": len(batches),
        "rounds": ROUNDS,
    }
    return data, error
