"""Harness of the "adapter" kind (lesson 5): the learner freezes a seeded float64 MLP and trains a
low-rank adapter beside its last layer.

``train(model, loader, loss_fn, make_optimizer, rank)`` runs once (issue 41: a program that told
a small maths run from a wide memory run, by a width or by counting its calls, left the base
trainable, or froze only its one wide layer, where memory was not counted), on the base of
``the_run``: ``Linear(inputs, hidden)``, ``Tanh``, ``Linear(hidden, classes)``, float64, without
biases, each weight wide enough that its gradient is tens of MiB, so that the kernel's count of
the process tells a gradient for any of them, whatever the child reports. ``make_optimizer(params)``
is the Adam the learner must use.

The model's weights and the adapter's pool are made by the child's set-up before the learner's
file loads and handed over to the supervisor (``Api.hand_off``, issue 42: each 32 MiB weight
spread over consecutive memory files, ``sharing``), the base drawn in place once handed over;
the supervisor reads them through ``_Read``: the weights at places it draws after the fork
(``hookstep.places``) as each batch is fetched, after each step and at the end (frozen weights
must never move). The tensors
the learner hands an optimizer besides the model's (its adapter) are moved, as that optimizer is
made, into the pool of ``POOL`` float64 numbers (their values copied there, the tensors computing
in it from then on; on CUDA, copied there at each sync): the supervisor reads the pool whole as
a tensor is placed (a ``pooled`` sync), as the first step of any optimizer begins (``start``:
the adapter's start) and at the end, and at places it draws after every step of
``make_optimizer``'s optimizers (a ``step`` sync), so the adapter's start, its size, its
trajectory and what moved are what it read. An optimizer of the learner's own is seen by torch's
global step hook: what it updates is pooled as well, so a second adapter trained beside the asked
one is counted. Between the ``memory-start`` and ``memory-end`` syncs around the call, the
supervisor reads the kernel's figures of the process's memory: what "no gradient for the base"
rests on.

What the child reports may only fail the loop: which tensors were pooled where (their shapes),
the model's gradients and the optimizer's state at each step, every output ``loss_fn`` was handed
(with how many steps had been taken) and the model's output on the run's inputs once ``train``
returned, at ``COLUMNS`` of its columns: the checks recompute those outputs from the frozen model
and the adapter the supervisor read, so a model changed by anything but that adapter (another
one, of another rank, trained by hand) fails.
"""

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from . import childfilter, scenarios, sharing, supervise
from .hookstep import places
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_STEPS = 200
READ_STEPS = 16  # steps whose sync the supervisor reads the parameters at (more fail anyway)
# float64 numbers of adapter the supervisor reads: a rank-8 adapter (8 x (4,096 + 1,024)) and
# a decoy of rank 1 beside it
POOL = 49152
MAX_POOLED = 16  # tensors listed
MAX_OUTPUTS = 64  # outputs handed to loss_fn that are recorded
MAX_ROWS = 64  # rows of one recorded output
COLUMNS = 8  # columns of each recorded output (spread evenly): a report, it only fails
# syncs at which the supervisor reads the pool whole: a tensor placed, the first step of any
# optimizer (the adapter's start: a loop may give it its values after making the optimizer, red
# team 8 F8), the end
WHOLE = ("pooled", "start", "memory-end")
MAX_NODES = 256  # autograd nodes of one output looked at for a full-size update (``_full_size``)
MAX_LOOKED = 8  # outputs looked at


def _base(params: dict[str, Any]) -> nn.Sequential:
    """The run's base, its weights not yet drawn (memory never touched): ``Linear(inputs,
    hidden)``, ``Tanh``, ``Linear(hidden, classes)``, float64, without biases (a bias's gradient,
    a few KiB, is below what the kernel's count can tell)."""
    d_in, hidden, classes = (int(params[k]) for k in ("inputs", "hidden", "classes"))
    f64 = torch.float64
    first = nn.Linear(d_in, hidden, bias=False, dtype=f64, device="meta")
    model = nn.Sequential(first, nn.Tanh(), nn.Linear(hidden, classes, bias=False, dtype=f64, device="meta"))
    return model.to_empty(device="cpu")


def prepare(params: dict[str, Any]) -> "sharing.Layout":
    """The supervisor's part, device-free: the layout the child's set-up hands over, the base's
    two weights then the adapter's pool (from the shapes alone: nothing drawn)."""
    d_in, hidden, classes = (int(params[k]) for k in ("inputs", "hidden", "classes"))
    return [
        {"shape": [hidden, d_in], "dtype": "float64"},
        {"shape": [classes, hidden], "dtype": "float64"},
        {"shape": [POOL], "dtype": "float64"},
    ]


def _draw(params: dict[str, Any], weights: Sequence[torch.Tensor]) -> list[scenarios.Batch]:
    """The base's weights drawn in place (``U(±1/√fan_in)``, as ``nn.Linear`` starts them),
    then the ``n_micro`` batches of ``micro_batch`` rows, seeded by ``params["seed"]``."""
    torch.manual_seed(int(params.get("seed", 0)))
    with torch.no_grad():
        for w in weights:
            bound = 1 / math.sqrt(w.shape[1])
            w.uniform_(-bound, bound)
    rows, d_in, classes = int(params["micro_batch"]), int(params["inputs"]), int(params["classes"])
    return [
        (torch.randn(rows, d_in, dtype=torch.float64), torch.randint(0, classes, (rows,)))
        for _ in range(int(params["n_micro"]))
    ]


def the_run(params: dict[str, Any]) -> tuple[nn.Sequential, list[scenarios.Batch], nn.Module]:
    """The one run's base, its batches and the loss: the same here and in the checks."""
    model = _base(params)
    return model, _draw(params, list(model.parameters())), nn.CrossEntropyLoss()


def columns(classes: int) -> torch.Tensor:
    """The columns of an output that are recorded: ``COLUMNS`` of them, spread evenly."""
    return torch.arange(COLUMNS) * max(classes // COLUMNS, 1) % classes


def pool_places(seed: int, extent: int) -> torch.Tensor:
    """The places of the pool's first ``extent`` numbers the supervisor reads at a step."""
    return places(seed + 1, [extent])[0]


def parse(
    read: list[Any], sizes: list[int]
) -> tuple[int, list[torch.Tensor], list[Any], int, list[Any]] | None:
    """A reading of ``_Read``: the seed, the base's places, the values there, the pool's extent
    (one past its last number that is not zero) and the pool's numbers read (whole, up to the
    extent, or at ``pool_places``); None where it has no such shape."""
    if not read or not isinstance(read[0], float) or not read[0].is_integer() or read[0] < 0:
        return None
    seed = int(read[0])
    at = places(seed, sizes)
    k = sum(len(p) for p in at)
    if len(read) < k + 2 or not isinstance(read[k + 1], float) or not read[k + 1].is_integer():
        return None
    extent = int(read[k + 1])
    if not 0 <= extent <= POOL:
        return None
    return seed, at, read[1 : 1 + k], extent, read[k + 2 :]


class _Read(supervise.Shared):
    """The base's weights and the adapter's pool as the child handed them over (the supervisor's
    read-only views of its memory files; inline on CUDA, the tensors themselves), read by the
    supervisor at each snapshot as ``[seed, base values…, extent, pool numbers…]``: the seed of the places
    read (``hookstep.places``), drawn from the operating system's randomness at the first
    snapshot, in the supervisor (the learner's process, forked before, never holds it); the
    base's values there; how far the pool holds numbers that are not zero (the supervisor's own
    scan); then the pool's numbers up to there, whole at the ``WHOLE`` syncs and at the end, at
    ``pool_places`` at the others (``whole``, set by the supervisor's hook of each label)."""

    def __init__(self, tensors: Iterable[torch.Tensor], mapped: bool = False) -> None:
        super().__init__(tensors, mapped)
        self._seed: int | None = None
        self._places: list[torch.Tensor] = []
        self.whole = True

    def mirror(self) -> None:
        """Nothing to copy: ``snapshot`` reads the weights' places where they are (on CUDA,
        64 MiB copied at every reading otherwise), and ``_Pool.publish`` copies the adapter."""

    def at(self, label: str) -> None:
        self.whole = label in WHOLE

    def snapshot(self) -> list[float | None]:
        if not self.views:
            return []
        if self._seed is None:
            self._seed = int.from_bytes(os.urandom(8), "little") >> 12  # a float holds it exactly
            self._places = places(self._seed, [v.numel() for v in self.views[:-1]])
        # the weights' places: in the hand-off's files on the CPU (the supervisor's own views,
        # whatever the child does with its tensors); inline on CUDA, on the device
        weights = self.tensors[:-1]
        base = [
            t.detach().reshape(-1)[own.to(t.device)].cpu()
            for t, own in zip(weights, self._places, strict=True)
        ]
        pool = self.views[-1]
        nonzero = torch.nonzero(pool != 0)  # NaN counts as not zero
        extent = int(nonzero[-1]) + 1 if len(nonzero) else 0
        numbers = pool[:extent] if self.whole else pool[pool_places(self._seed, extent)]
        return [float(self._seed), *flat(base), float(extent), *flat([numbers])]


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class _Pool:
    """The adapter's place in memory the supervisor reads: each tensor an optimizer is handed
    besides the model's, float64 and small enough, gets the next free numbers of ``numbers``
    (its values copied there; on the CPU the tensor then computes in it, elsewhere its values
    are copied there before each sync). ``layout``: each tensor's shape and offset (-1: not
    pooled, not float64 or no room left)."""

    def __init__(self, numbers: torch.Tensor, model: dict[int, int]) -> None:
        self.numbers, self.model = numbers, model
        self.layout: list[dict[str, Any]] = []
        self.placed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.used = 0
        self.open = True  # closed once the run is over

    def place(self, group: Iterable[Any]) -> bool:
        """Pool the tensors of ``group`` not seen before; whether any was new."""
        new = False
        for p in group:
            if not isinstance(p, torch.Tensor) or id(p) in self.model or id(p) in self.placed:
                continue
            if len(self.layout) >= MAX_POOLED:  # already far more than an adapter's two
                continue
            n, entry = p.numel(), {"shape": list(p.shape), "offset": -1}
            view = self.numbers[:0]
            if p.dtype == torch.float64 and self.used + n <= POOL:
                view = self.numbers[self.used : self.used + n].view(p.shape)
                with torch.no_grad():
                    view.copy_(p.detach().to("cpu"))
                if p.device.type == "cpu":
                    p.data = view  # the tensor now lives where the supervisor reads
                entry["offset"] = self.used
                self.used += n
            self.placed[id(p)] = (p, view)
            self.layout.append(entry)
            new = True
        return new

    def publish(self) -> None:
        """Copy the values of tensors that do not live in the pool (on a GPU) into it."""
        with torch.no_grad():
            for p, view in self.placed.values():
                if view.numel() and p.data_ptr() != view.data_ptr():
                    view.copy_(p.detach().to("cpu", torch.float64).reshape(view.shape))


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it reads, through ``_Read``); the child
    makes the base and the pool, hands them over and draws the base in place (``set_up``, before
    the learner's file is loaded), then runs the learner's ``train`` (``learner``)."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    loss_fn: nn.Module = nn.CrossEntropyLoss()
    layout = prepare(params)
    lr, rank = float(params["lr"]), int(params["rank"])

    def set_up() -> tuple[nn.Module, list[torch.Tensor], list[scenarios.Batch], torch.Tensor]:
        """The child's, before any of the learner's code: the base (its storage not yet touched,
        ``_base``) and the pool handed over, then the base drawn in place, in the hand-off's
        memory files (on the CPU: its pages are the child's once, as they were drawn in the old
        path's mapping); inline on CUDA, drawn, moved to the device, then handed over."""
        supervise.exact_malloc()  # before the base's blocks: the kernel's figures go by them
        model = _base(params)
        weights: list[torch.Tensor] = list(model.parameters())
        pool = torch.zeros(POOL, dtype=torch.float64)  # on the CPU: the supervisor reads it there
        if torch.device(device).type == "cpu":
            api.hand_off([*weights, pool])
            return model, weights, _draw(params, weights), pool
        batches = _draw(params, weights)
        model = model.to(device)
        weights = list(model.parameters())
        api.hand_off([*weights, pool])
        return model, weights, [(x.to(device), y.to(device)) for x, y in batches], pool

    def reading(label: str) -> "supervise.Hook":
        def hook(observer: Any, _index: int) -> None:
            if isinstance(observer.shared, _Read):  # the hand-off's reader (syncs come after it)
                observer.shared.at(label)

        return hook

    for label in ("batch", "step", *WHOLE):
        api.on_sync(label, reading(label))
    cols = columns(int(params["classes"]))
    # the kernel's count of the child grades the base's gradients: the child may start threads,
    # never a process, which the process's figures would count apart
    processes = childfilter.prepare_processes()

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, weights, batches, numbers = set_up()
        index = {id(p): i for i, p in enumerate(weights)}
        pool = _Pool(numbers, index)
        steps: list[dict[str, Any]] = []
        base_grads: list[int] = []
        optimizers: list[list[int]] = []
        outputs: list[dict[str, Any]] = []
        made: set[int] = set()
        state = {"batch": -1, "steps": 0, "foreign": 0, "started": 0}

        def pooled(group: Iterable[Any]) -> None:
            if pool.place(group):
                pool.publish()
                api.sync("pooled", len(pool.layout), snapshot=True)

        def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
            optimizer = torch.optim.Adam(group, lr=lr)
            # its parameters as torch read them: param groups (dicts) and named parameters are
            # torch.optim's forms too (red team 8: the dicts crashed the recording)
            group = [p for g in optimizer.param_groups for p in g["params"]]
            made.add(id(optimizer))
            owned = [index.get(id(p), -1) for p in group]
            optimizers.append(owned)
            extra = [p for p, i in zip(group, owned, strict=True) if i < 0]
            pooled(extra)
            record: dict[str, Any] = {}

            def before() -> None:
                record.clear()
                if len(steps) >= MAX_STEPS or sum(p.numel() for p in extra) > POOL:
                    return
                record.update(
                    batch=state["batch"],
                    adapter_grads=[p.grad is not None for p in extra],
                    base_grads=[i for i, p in enumerate(weights) if p.grad is not None],
                    grad_bytes=_bytes([p.grad for p in [*weights, *extra] if p.grad is not None]),
                )

            def after(_result: object) -> None:
                if state["steps"] < MAX_STEPS and pool.open:
                    state["steps"] += 1
                    pool.publish()
                    # the supervisor reads the adapter
                    api.sync("step", state["steps"], snapshot=state["steps"] <= READ_STEPS)
                if not record:
                    return
                kept = [optimizer.state.get(p, {}) for p in group]
                record["base_state"] = sum(bool(s) for s, i in zip(kept, owned, strict=True) if i >= 0)
                record["state_bytes"] = _bytes(
                    [t for s in kept for k, t in s.items() if k != "step" and torch.is_tensor(t)]
                )
                steps.append(dict(record))

            wrap_step(optimizer, before, after)
            return optimizer

        def any_step(optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
            """Every optimizer's step, an optimizer of the learner's own too: what it updates
            (groups added after ``make_optimizer`` included) is pooled and read as well."""
            if pool.open:
                state["foreign"] += id(optimizer) not in made
                pooled(p for g in optimizer.param_groups for p in g["params"])
                if not state["started"]:  # the adapter's start: as the first step finds it
                    state["started"] = 1
                    pool.publish()
                    api.sync("start", 0, snapshot=True)

        def served() -> Iterator[Any]:
            for i, batch in enumerate(batches):
                base_grads.append(sum(p.grad is not None for p in weights))
                api.sync("batch", i, snapshot=True)
                state["batch"] = i
                yield batch

        with torch.no_grad():  # the shared pages in this process's page tables before the watch
            for p in [*weights, numbers]:
                p.sum()
        _warm_up(weights, batches[0], loss_fn, lr, rank)
        scenarios.settle()
        api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        forked = not torch.cuda.is_initialized()  # not inline on CUDA
        if forked:
            childfilter.stack(processes)
        name_limits(alone=api.alone or forked, kernel=True)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer", "rank"])
        loader = scenarios.ServedLoader(len(batches), served)
        full = (
            int(params["hidden"]) * int(params["classes"]),
            {w.untyped_storage().data_ptr() for w in weights},
        )
        recording = _Recording(loss_fn, outputs, state, cols, full)
        hook = register_optimizer_step_pre_hook(any_step)
        api.sync("memory-start")
        try:
            error = api.call(fn, [model, loader, recording, make_optimizer, rank])
        finally:
            hook.remove()
            pool.open = False
            recording.open = False
        pool.publish()
        api.sync("memory-end", snapshot=True)
        base_grads.append(sum(p.grad is not None for p in weights))
        data = {
            "steps": steps,
            "base_grads": base_grads,
            "optimizers": optimizers[:16],
            "pooled": pool.layout,
            "foreign_steps": state["foreign"],
            "outputs": outputs,
            "full_size": recording.found,
            "probe": _probe(model, batches, cols) if error is None else None,
        }
        return data, error

    return api.supervise(learner, alone=False, layout=layout, device=device, reading=_Read)


class _Recording(nn.Module):
    """The loss the learner is handed: the harness's, recording each output it is handed (its
    values at ``cols``, and how many of ``make_optimizer``'s steps had been taken), for the
    checks to recompute from the adapter the supervisor read."""

    def __init__(
        self,
        inner: nn.Module,
        outputs: list[dict[str, Any]],
        state: dict[str, int],
        cols: torch.Tensor,
        full: tuple[int, set[int]],
    ) -> None:
        super().__init__()
        self.inner = inner
        self.outputs, self.state, self.cols = outputs, state, cols
        self.open = True
        self.full, self.looked = full, 0
        self.found: list[int] | None = None  # the shape of a full-size update (``_full_size``)

    def forward(self, output: Any, *args: Any, **kwargs: Any) -> Any:
        if self.open and len(self.outputs) < MAX_OUTPUTS:
            record: dict[str, Any] = {"steps": self.state["steps"], "values": _rows(output, self.cols)}
            if isinstance(output, torch.Tensor):  # a report: it only names a mistake
                record |= {
                    "dtype": str(output.dtype).removeprefix("torch.")[:16],
                    "grad": output.requires_grad,
                }
            self.outputs.append(record)
        if self.open and self.found is None and self.looked < MAX_LOOKED and isinstance(output, torch.Tensor):
            self.looked += 1
            self.found = _full_size(output, *self.full)
        return self.inner(output, *args, **kwargs)


def _full_size(output: torch.Tensor, numbers: int, base: set[int]) -> list[int] | None:
    """The shape of a tensor of at least ``numbers`` numbers (the last layer's ``hidden ×
    classes``) that ``output``'s graph made from tensors the program trains besides the model's
    weights, where none of the model's weights reaches it: the adapter's update made at full size
    (``A @ B`` before ``h`` multiplies it, a weight recomputed as ``W + A @ B`` by
    ``torch.nn.utils.parametrize``), which backward gives a gradient as large. None where there is
    none (or the graph is not torch's). A report: it only names the memory run's failure."""
    start = getattr(output, "grad_fn", None)
    if start is None:
        return None
    reach: dict[Any, tuple[bool, bool]] = {}  # node → (reaches a trained tensor, a model weight)
    found: list[list[int]] = []

    def visit(node: Any) -> tuple[bool, bool]:
        if node in reach:
            return reach[node]
        if len(reach) >= MAX_NODES:
            raise RecursionError  # too large a graph to tell
        reach[node] = (False, False)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):  # AccumulateGrad: a leaf
            own = variable.untyped_storage().data_ptr() in base
            reach[node] = (not own, own)
            return reach[node]
        trained = weight = False
        for nxt, _ in node.next_functions:
            if nxt is not None:
                t, w = visit(nxt)
                trained, weight = trained or t, weight or w
        reach[node] = (trained, weight)
        big = [list(m.shape) for m in getattr(node, "_input_metadata", ()) if math.prod(m.shape) >= numbers]
        if trained and not weight and big:
            found.append([int(n) for n in big[0]])
        return reach[node]

    try:
        visit(start)
    except (RecursionError, RuntimeError, AttributeError, TypeError):
        return None
    return max(found, key=math.prod) if found else None


def _rows(output: Any, cols: torch.Tensor) -> list[list[float | None]] | None:
    """An output's rows at ``cols``, where it is a float tensor of at most ``MAX_ROWS`` rows of
    the base's classes; None otherwise."""
    if not isinstance(output, torch.Tensor) or not output.is_floating_point() or output.dim() != 2:
        return None
    if output.shape[0] > MAX_ROWS or output.shape[1] <= int(cols.max()):
        return None
    with torch.no_grad():
        values = flat([output.detach()[:, cols.to(output.device)]])
    return [values[i : i + COLUMNS] for i in range(0, len(values), COLUMNS)]


def _probe(model: nn.Module, batches: list[scenarios.Batch], cols: torch.Tensor) -> dict[str, Any]:
    """The model's output on the run's inputs once ``train`` returned: with the adapter put in
    it, the frozen model's plus the adapter's; else the frozen model's."""
    try:
        with torch.no_grad():
            return {"values": _rows(model(torch.cat([x for x, _y in batches])), cols)}
    except Exception as exc:  # noqa: BLE001 (the learner's model: anything may raise)
        return {"values": None, "error": type(exc).__name__[:40]}


def _warm_up(
    weights: Sequence[torch.Tensor], batch: scenarios.Batch, loss_fn: nn.Module, lr: float, rank: int
) -> None:
    """An adapter's Adam step beside the base, its weights detached (no gradient, nothing written
    to them), on the first batch, in the child before the supervisor watches its memory: torch's
    code that such a loop runs is paged in and its lazy state made here (the matrix library's
    buffers for products of these sizes: 2.4 MiB), not counted as the learner's."""
    first, last = (w.detach() for w in weights)
    dtype, device = last.dtype, last.device
    a = nn.Parameter(
        torch.empty(last.shape[1], max(rank, 1), dtype=dtype, device=device).uniform_(-0.01, 0.01)
    )
    b = nn.Parameter(torch.zeros(max(rank, 1), last.shape[0], dtype=dtype, device=device))
    drawn = torch.randn(4, 4, dtype=dtype, device=device)
    for made in (drawn, nn.Linear(4, 4, bias=False, dtype=dtype, device=device).weight):  # how adapters start
        nn.init.kaiming_uniform_(made)
        nn.init.normal_(made)
    optimizer = torch.optim.Adam([a, b], lr=lr)
    h = torch.tanh(F.linear(batch[0], first))
    loss_fn(F.linear(h, last) + h @ a @ b, batch[1]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
