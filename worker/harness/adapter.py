"""Harness of the "adapter" kind (lesson 5): the learner freezes a seeded float64 MLP and trains a
low-rank adapter beside its last layer.

``train(model, loader, loss_fn, make_optimizer, rank)``: ``make_optimizer(params)`` is the Adam the
learner must use. The model's own parameters are shared with the supervisor, which reads them as
each batch is fetched and at the end (frozen weights must never move). The tensors the learner
hands an optimizer besides the model's (its adapter) are moved, as that optimizer is made, into a
pool of ``POOL`` float64 numbers shared with the supervisor too (their values copied there, the
tensors computing in it from then on; on CUDA, copied there at each sync): the supervisor reads
the adapter as it was placed (a ``pooled`` sync) and after every step of ``make_optimizer``'s
optimizers (a ``step`` sync), so the adapter's trajectory, its size and what moved are what it
read. An optimizer of the learner's own is seen by torch's global step hook: what it updates is
pooled as well, so a second adapter trained beside the asked one is counted.

What the child reports may only fail the loop: which tensors were pooled where (their shapes),
the model's gradients and the optimizer's state at each step, every output ``loss_fn`` was handed
(with how many steps had been taken) and the model's output on the run's inputs once ``train``
returned: the checks recompute those outputs from the frozen model and the adapter the
supervisor read, so a model changed by anything but that adapter (another one, of another rank,
trained by hand) fails.

Then, where the exercise has one (``params["memory_width"]``), the memory run: ``train`` once more
on a base whose first layer is that wide (``scenarios.wide_base``), between two syncs where the
supervisor reads the kernel's figures of the process's memory: a base left trainable gets a
gradient of tens of MiB there, whatever the child reports.
"""

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from . import childfilter, scenarios, supervise
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_STEPS = 200
POOL = 1024  # float64 numbers of adapter the supervisor reads (rank 53 beside a 16 x 3 layer)
MAX_POOLED = 16  # tensors listed
MAX_OUTPUTS = 64  # outputs handed to loss_fn that are recorded
MAX_ROWS = 64  # rows of one recorded output


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
        self.open = True  # closed once the maths run is over

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
    params = spec["params"]
    device = spec.get("device", "cpu")
    scenario, weights, index = scenarios.placed(params, device)
    model, batches = scenario.model, scenario.micro_batches
    lr = float(params["lr"])
    wide = scenarios.wide_base(params)
    if wide is not None:  # the memory run's base: the kernel's figures go by it
        supervise.exact_malloc()
        wide = (wide[0].to(device), [(x.to(device), y.to(device)) for x, y in wide[1]], wide[2])
    # with a memory run, the kernel's count of the child grades the base's gradients: the child
    # may start threads, never a process, which the process's figures would count apart
    processes = childfilter.prepare_processes() if wide is not None else None
    numbers = torch.zeros(POOL, dtype=torch.float64)
    api.share([*weights, numbers])  # the model's weights, then the adapter's pool
    pool = _Pool(numbers, index)

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        steps: list[dict[str, Any]] = []
        base_grads: list[int] = []
        optimizers: list[list[int]] = []
        outputs: list[dict[str, Any]] = []
        made: set[int] = set()
        state = {"batch": -1, "steps": 0, "foreign": 0}

        def pooled(group: Iterable[Any]) -> None:
            if pool.place(group):
                pool.publish()
                api.sync("pooled", len(pool.layout), snapshot=True)

        def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
            group = list(group)
            optimizer = torch.optim.Adam(group, lr=lr)
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
                    api.sync("step", state["steps"], snapshot=True)  # the supervisor reads the adapter
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

        def served() -> Iterator[Any]:
            for i, batch in enumerate(batches):
                base_grads.append(sum(p.grad is not None for p in weights))
                api.sync("batch", i, snapshot=True)
                state["batch"] = i
                yield batch

        forked = processes is not None and not torch.cuda.is_initialized()  # not inline on CUDA
        if processes is not None and forked:
            childfilter.stack(processes)
        if wide is not None:
            _warm_up(model, batches[0], scenario.loss_fn, lr, int(params["rank"]))
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer", "rank"])
        loader = scenarios.ServedLoader(len(batches), served)
        hook = register_optimizer_step_pre_hook(any_step)
        loss_fn = _Recording(scenario.loss_fn, outputs, state)
        try:
            error = api.call(fn, [model, loader, loss_fn, make_optimizer, int(params["rank"])])
        finally:
            hook.remove()
            pool.open = False
            loss_fn.open = False
        base_grads.append(sum(p.grad is not None for p in weights))
        data = {
            "steps": steps,
            "base_grads": base_grads,
            "optimizers": optimizers[:16],
            "pooled": pool.layout,
            "foreign_steps": state["foreign"],
            "outputs": outputs,
            "probe": _probe(model, batches) if error is None else None,
            "final_params": flat(weights),
        }
        if wide is not None and error is None:
            error = _memory_run(api, fn, wide, lr, int(params["rank"]))
        return data, error

    return api.supervise(learner, alone=processes is None)


class _Recording(nn.Module):
    """The loss the learner is handed: the harness's, recording each output it is handed (its
    values, and how many of ``make_optimizer``'s steps had been taken), for the checks to
    recompute from the adapter the supervisor read."""

    def __init__(self, inner: nn.Module, outputs: list[dict[str, Any]], state: dict[str, int]) -> None:
        super().__init__()
        self.inner = inner
        self.outputs, self.state = outputs, state
        self.open = True

    def forward(self, output: Any, *args: Any, **kwargs: Any) -> Any:
        if self.open and len(self.outputs) < MAX_OUTPUTS:
            self.outputs.append({"steps": self.state["steps"], "values": _rows(output)})
        return self.inner(output, *args, **kwargs)


def _rows(output: Any) -> list[list[float | None]] | None:
    """An output's rows as numbers, where it is a float tensor of at most ``MAX_ROWS`` rows of
    3; None otherwise."""
    if not isinstance(output, torch.Tensor) or not output.is_floating_point():
        return None
    if output.dim() != 2 or output.shape[1] != 3 or output.shape[0] > MAX_ROWS:
        return None
    with torch.no_grad():
        values = flat([output.detach()])
    return [values[i : i + 3] for i in range(0, len(values), 3)]


def _probe(model: nn.Module, batches: list[scenarios.Batch]) -> dict[str, Any]:
    """The model's output on the run's inputs once ``train`` returned: with the adapter put in
    it, the frozen model's plus the adapter's; else the frozen model's."""
    try:
        with torch.no_grad():
            return {"values": _rows(model(torch.cat([x for x, _y in batches])))}
    except Exception as exc:  # noqa: BLE001 (the learner's model: anything may raise)
        return {"values": None, "error": type(exc).__name__[:40]}


def _warm_up(model: Any, batch: scenarios.Batch, loss_fn: nn.Module, lr: float, rank: int) -> None:
    """An adapter's Adam step beside a frozen copy of the model, in the child before the
    supervisor watches its memory: torch's code that such a loop runs is paged in and its lazy
    state made here, not counted as the learner's."""
    base = copy.deepcopy(model).requires_grad_(False)
    like = {"dtype": base[2].weight.dtype, "device": base[2].weight.device}
    a = torch.zeros(base[2].in_features, rank, **like).requires_grad_(True)
    b = torch.zeros(rank, base[2].out_features, **like).requires_grad_(True)
    optimizer = torch.optim.Adam([a, b], lr=lr)
    h = base[1](base[0](batch[0]))
    loss_fn(base[2](h) + h @ a @ b, batch[1]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _memory_run(
    api: "Api",
    fn: Callable[..., Any],
    wide: tuple[nn.Sequential, list[scenarios.Batch], nn.Module],
    lr: float,
    rank: int,
) -> dict[str, Any] | None:
    """``train`` once more, on the wide base and its batches, each ``make_optimizer`` a plain
    Adam, between two syncs where the supervisor reads the kernel's figures of the process's
    memory (``Observer.watch``): what a pass on "no gradient for the base" rests on."""
    model, batches, loss_fn = wide

    def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.Adam(list(group), lr=lr)

    def served() -> Iterator[scenarios.Batch]:
        for i, batch in enumerate(batches):
            api.sync("memory-batch", i)  # the supervisor counts the batches the run fetched
            yield batch

    api.sync("memory-start")
    loader = scenarios.ServedLoader(len(batches), served)
    error = api.call(fn, [model, loader, loss_fn, make_optimizer, rank])
    api.sync("memory-end")
    return error
