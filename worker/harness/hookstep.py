"""Harness of the "hookstep" kind (lesson 5): the learner's loop updates each parameter
in its ``register_post_accumulate_grad_hook``, so that one parameter's gradient is alive at a time.

``train(model, loader, loss_fn, make_optimizer)`` runs once, over the batches of one model:
where the exercise has a memory run (``params["memory_width"]``), the wide model of
``wide_scenario`` (``params["memory_layers"]`` square layers that wide, float64, two batches),
graded on both its numbers and the kernel's count of the process's memory; else the seeded
float64 MLP of the scenario. One run only (issue 41): a program that told a small maths run from
the wide memory run (by a width, or by counting its calls) did the wrong thing where memory was
not measured and the right thing where it was.

``make_optimizer(params)`` is the Adam the learner must use (one per parameter). The supervisor
reads the parameters as each backward through the model begins (a ``backward`` sync, sent from a
hook the harness registers on every parameter before the learner's file is loaded, so it runs
before the learner's: no step of that backward has run yet) and at the end (``Sampled``: the
biases whole, and of each weight the values at places it draws itself, after the fork): what every
step before that backward made, whatever order the loop fetched its batches in (red team 6: read
as each batch was fetched, a right loop that held the next batch, or took ``list(loader)``
first, was read one batch early and refused). The child reports every optimizer step: the
backward it belongs to (the one running, or the last one begun), whether backward was running,
which of the optimizer's parameters had a gradient, and how many gradients (and bytes) were alive
then; and how many were alive as each batch was fetched. These name the mistake, or fail the
loop; a pass rests on the parameters read and the memory counted. What the learner's program can
reach (``make_optimizer``'s closure, the hooks', the loader's) shares no name with what the
harness reads after the call: rebinding or breaking them is reported, never raised here.
"""

import copy
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from . import childfilter, scenarios, sharing, supervise
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_STEPS = 2000
# values the supervisor reads of each parameter larger than this at a sync, at places drawn from
# a seed it draws once, after the fork (a wide weight holds 1,048,576: the trace could not hold
# them all); a parameter this small is read whole
SAMPLES = 256
# a step the harness could not record, its own names rebound by the program (not the shape it writes)
TAMPERED = "tampered"


def places(seed: int, sizes: Iterable[int], samples: int = SAMPLES) -> list[torch.Tensor]:
    """The places ``Sampled`` reads, within each parameter of ``sizes`` values, drawn from
    ``seed``: every place of a small one, ``samples`` of a larger one (sorted, no repeats).
    The same in the supervisor and in the checks, which rebuild them from the seed."""
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.arange(n) if n <= samples else torch.randint(n, (samples,), generator=generator).unique()
        for n in sizes
    ]


class Sampled(supervise.Shared):
    """The run's parameters in the shared mapping, read by the supervisor at each snapshot as
    ``[seed, values…]``: the seed of the places it read (``places``), then the values there,
    parameter after parameter. The seed comes from the operating system's randomness at the
    first snapshot, in the supervisor: the learner's process, forked before, never holds it, so a
    loop right only at some places of a weight is as likely to be read wrong as one right
    nowhere. The hookstep kind's own (``observer.Shared`` reads every value); a snapshot holds
    a few thousand numbers, so the supervisor's memory, which the job's cgroup counts with the
    child's, hardly moves inside the memory run."""

    def __init__(self, tensors: Iterable[torch.Tensor], mapped: bool = False) -> None:
        super().__init__(tensors, mapped)
        self._seed: int | None = None
        self._places: list[torch.Tensor] = []

    def snapshot(self) -> list[float | None]:
        if not self.views:
            return []
        if self._seed is None:
            self._seed = int.from_bytes(os.urandom(8), "little") >> 12  # a float holds it exactly
            self._places = places(self._seed, [v.numel() for v in self.views])
        self.mirror()  # inline on CUDA: the parameters as they are now (a no-op on the CPU)
        values = [v.detach().reshape(-1)[own] for v, own in zip(self.views, self._places, strict=True)]
        return [float(self._seed), *flat(values)]


def _alive(weights: Sequence[torch.Tensor]) -> tuple[int, int]:
    grads = [p.grad for p in weights if p.grad is not None]
    return len(grads), sum(g.numel() * g.element_size() for g in grads)


def _profiling() -> bool:
    """Whether torch's profiler is recording in this process now."""
    return bool(torch._C._autograd._profiler_enabled())


def wide_scenario(params: dict[str, Any]) -> tuple[nn.Sequential, list[scenarios.Batch], nn.Module] | None:
    """The memory run (``params["memory_width"]``), or None: ``params["memory_layers"]`` square
    ``Linear`` layers that wide (3 where not given), Tanh between them, float64, seeded apart; two
    batches of 8 rows, cross-entropy. Its gradients are MiB each, so the kernel's count of the
    process's memory tells one gradient alive at a time from all of them (the maths run's are a
    few hundred bytes).

    Many layers (issue 41, red team 4): a loop that holds every gradient adds the other layers'
    gradients, (layers - 1) × one layer's, to what a right loop holds; what Adam's arithmetic
    makes besides (torch's single-tensor Adam: two temporaries of the layer's size, none in
    the fused kernel) is the same whichever of them runs it. Of three layers, every gradient alive
    under a fused Adam read 74.6 MiB, the solution under the default Adam 74.5: the line could
    not hold between them. Twelve layers 512 wide keep the 24 MiB of parameters and leave 9 layers'
    gradients (18 MiB) between the two."""
    width = int(params.get("memory_width") or 0)
    if not width:
        return None
    torch.manual_seed(int(params.get("seed", 0)) + 1)
    layers: list[nn.Module] = []
    for i in range(int(params.get("memory_layers") or 3)):
        layers += [nn.Tanh(), nn.Linear(width, width)] if i else [nn.Linear(width, width)]
    model = nn.Sequential(*layers).to(torch.float64)
    # two batches: Adam makes its state at the first step, so in a run of one batch its state,
    # not the gradients, sets the peak; in the second backward the state is there already and
    # every gradient held at once shows above it
    batches = [(torch.randn(8, width, dtype=torch.float64), torch.randint(0, width, (8,))) for _ in range(2)]
    return model, batches, nn.CrossEntropyLoss()


def the_run(params: dict[str, Any], device: str) -> tuple[nn.Module, list[scenarios.Batch], nn.Module, bool]:
    """The one run's model, batches and loss on ``device``, and whether it is the wide memory run."""
    built = wide_scenario(params)
    if built is None:
        scenario = scenarios.build(params)
        model, batches, loss_fn = scenario.model, scenario.micro_batches, scenario.loss_fn
    else:
        model, batches, loss_fn = built
    return model.to(device), [(x.to(device), y.to(device)) for x, y in batches], loss_fn, built is not None


def prepare(params: dict[str, Any]) -> "sharing.Layout":
    """The supervisor's part, device-free: the layout of the parameters the child's set-up hands
    over: the wide memory run's layers (shapes alone: 24 MiB of weights are not drawn here), or
    the scenario's model built on the CPU without its micro-batches."""
    width = int(params.get("memory_width") or 0)
    if width:
        layers = int(params.get("memory_layers") or 3)
        return [
            {"shape": shape, "dtype": "float64"} for _ in range(layers) for shape in ([width, width], [width])
        ]
    return sharing.layout(scenarios.build({**params, "n_micro": 0}).model.parameters())


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it will read, through ``Sampled``); the
    child builds the run (``set_up``, before the learner's file is loaded), hands its parameters
    over and runs the learner's loop (``learner``)."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    lr = float(params["lr"])
    wide = bool(params.get("memory_width"))
    layout = prepare(params)
    # with a memory run, the kernel's count of the child grades memory: the child may start
    # threads (a logging thread, the profiler's), never a process, which the kernel counts apart
    processes = childfilter.prepare_processes() if wide else None

    def set_up() -> tuple[Any, ...]:
        if wide:
            supervise.exact_malloc()  # before the wide model's blocks: the kernel's figures go by them
        model, batches, loss_fn, _ = the_run(params, device)
        weights = list(model.parameters())
        # the parameters in the shared memory: the supervisor reads them there (``Sampled``);
        # the child writes them in place, in pages the job's cgroup counted as they were filled
        api.hand_off(weights)
        return model, batches, loss_fn, weights, {id(p): i for i, p in enumerate(weights)}

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, batches, loss_fn, weights, index = set_up()
        steps: list[list[Any]] = []
        between: list[int] = []
        # the backward a step belongs to: the one running, or the last one begun
        state = {"backward": -1, "task": -1}
        # whether torch's profiler was recording at a step or a batch: the learner's process's
        # word, which only chooses the text of a memory line crossed (its events count there)
        profiled: list[bool] = []

        def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
            optimizer = torch.optim.Adam(group, lr=lr)
            # its parameters as torch read them: param groups (dicts) and named parameters are
            # torch.optim's forms too (red team 8: the dicts crashed the recording)
            group = [p for g in optimizer.param_groups for p in g["params"]]
            owned = [index.get(id(p), -1) for p in group]

            def recorded() -> None:
                if len(steps) < MAX_STEPS:
                    try:
                        alive, nbytes = _alive(weights)
                        stepped = [i for i, p in zip(owned, group, strict=True) if p.grad is not None]
                        backward = torch._C._current_autograd_node() is not None
                        steps.append([state["backward"], backward, stepped, alive, nbytes])
                        if not profiled and _profiling():
                            profiled.append(True)
                    except Exception:  # the harness's names rebound by the program: not its shape
                        steps.append([TAMPERED])

            wrap_step(optimizer, recorded)
            return optimizer

        def begun(p: torch.Tensor) -> None:
            """The harness's hook on each parameter, before the learner's: at the first of a
            backward, the supervisor reads the parameters every earlier step left."""
            task = torch._C._current_graph_task_id()
            if task != state["task"]:
                state["task"] = task
                state["backward"] += 1
                api.sync("backward", state["backward"], snapshot=True)

        def served() -> Iterator[scenarios.Batch]:
            for i, batch in enumerate(batches):
                try:
                    between.append(_alive(weights)[0])
                    if not profiled and _profiling():
                        profiled.append(True)
                except Exception:  # the harness's names rebound by the program
                    steps.append([TAMPERED])
                api.sync("batch", i)
                yield batch

        # the harness's own names for what it reads after the call: no closure the program can
        # reach shares them, so rebinding a closure's names cannot reach these
        mine, my_steps, my_between, my_profiled = tuple(weights), steps, between, profiled
        for p in mine:
            p.register_post_accumulate_grad_hook(begun)  # before the learner's: it runs first
        if wide:
            with torch.no_grad():  # the shared pages in this process's page tables before the watch
                for p in mine:
                    p.sum()
            _warm_up(model, batches[0], loss_fn, lr)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        forked = processes is not None and not api.inline
        if processes is not None and forked:
            childfilter.stack(processes)
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer"])
        loader = scenarios.ServedLoader(len(batches), served)
        if wide:
            api.sync("memory-start", snapshot=True)
        error = api.call(fn, [model, loader, loss_fn, make_optimizer])
        if wide:
            api.sync("memory-end", snapshot=True)
        data = {
            "steps": my_steps,
            "between": [*my_between, _alive(mine)[0]],
            "n_params": len(mine),
            "grad_bytes": sum(p.numel() * p.element_size() for p in mine),
            "profiler": bool(my_profiled),
        }
        return data, error

    return api.supervise(learner, alone=processes is None, layout=layout, device=device, reading=Sampled)


def _warm_up(model: nn.Module, batch: scenarios.Batch, loss_fn: nn.Module, lr: float) -> None:
    """A plain Adam step and one stepped in each parameter's hook, on a narrow copy of the run's
    model (its layers 16 wide) and a few rows, in the child before the supervisor watches its
    memory: torch's code that such loops run is paged in and its lazy state made here (22 MiB of
    the process's pages at the first backward), not counted as the learner's."""
    narrow = nn.Sequential(
        *(nn.Linear(16, 16) if isinstance(m, nn.Linear) else copy.deepcopy(m) for m in model.children())
    )
    weights = list(narrow.to(batch[0].device, batch[0].dtype).parameters())
    x, y = batch[0][:4, :16], batch[1][:4] % 16
    plain = torch.optim.Adam(weights, lr=lr)
    loss_fn(narrow(x), y).backward()
    plain.step()
    plain.zero_grad(set_to_none=True)
    optimizers: dict[torch.Tensor, torch.optim.Optimizer] = {p: torch.optim.Adam([p], lr=lr) for p in weights}

    def step(p: torch.Tensor) -> None:
        optimizers[p].step()
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(step) for p in weights]
    loss_fn(narrow(x), y).backward()
    for handle in handles:
        handle.remove()
    _warm_profiler(narrow, x, y, loss_fn)


def _warm_profiler(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module) -> None:
    """torch's profiler, once, on the narrow copy (red team F3): its first use loads its code and
    makes its lazy state, about 7 MiB of the process's pages, which the kernel's count cannot tell
    from gradients held; made here, before the watch, they are not the learner's. What a later
    profiler records (its events, a summary of them) is the learner's process's memory all the
    same: that still counts (``worker/checks/hookstep.py`` names it where the line is crossed).
    Its C++ side writes a line to stderr as it starts and stops: not the learner's output."""
    from torch.profiler import ProfilerActivity, profile, record_function

    quiet = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    try:
        os.dup2(quiet, 2)
        recording = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True)
        with recording as prof, record_function("warm-up"):
            loss_fn(model(x), y).backward()
        prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=1)
        prof.key_averages(group_by_input_shape=True).table(row_limit=1)
        del prof
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)
