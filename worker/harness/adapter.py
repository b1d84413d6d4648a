"""Harness of the "adapter" kind (lesson 5): the learner freezes a seeded float64 MLP and trains a
low-rank adapter beside its last layer.

``train(model, loader, loss_fn, make_optimizer, rank)``: ``make_optimizer(params)`` is the Adam the
learner must use. The model's own parameters are shared with the supervisor, which reads them as
each batch is fetched and at the end (frozen weights must never move). The adapter is made by the
learner's code, inside the child: what its optimizer holds is reported by the child at every step
(the values before and after the update, which parameters are the model's, which had a gradient,
the state it keeps), with the model's gradients alive at each batch. The checks replay the
adapter's training from the values it started with.

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

from . import childfilter, scenarios, supervise
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_STEPS = 200
MAX_ADAPTER = 4096  # numbers of adapter parameters reported per step


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


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
    api.share(weights)

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        steps: list[dict[str, Any]] = []
        base_grads: list[int] = []
        optimizers: list[list[int]] = []
        state = {"batch": -1}

        def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
            group = list(group)
            optimizer = torch.optim.Adam(group, lr=lr)
            owned = [index.get(id(p), -1) for p in group]
            optimizers.append(owned)
            extra = [p for p, i in zip(group, owned, strict=True) if i < 0]
            record: dict[str, Any] = {}

            def before() -> None:
                record.clear()
                if len(steps) >= MAX_STEPS or sum(p.numel() for p in extra) > MAX_ADAPTER:
                    return
                record.update(
                    batch=state["batch"],
                    shapes=[list(p.shape) for p in extra],
                    before=flat(extra) if extra else [],
                    adapter_grads=[p.grad is not None for p in extra],
                    base_grads=[i for i, p in enumerate(weights) if p.grad is not None],
                    grad_bytes=_bytes([p.grad for p in [*weights, *extra] if p.grad is not None]),
                )

            def after(_result: object) -> None:
                if not record:
                    return
                with torch.no_grad():
                    record["after"] = flat(extra) if extra else []
                kept = [optimizer.state.get(p, {}) for p in group]
                record["base_state"] = sum(bool(s) for s, i in zip(kept, owned, strict=True) if i >= 0)
                record["state_bytes"] = _bytes(
                    [t for s in kept for k, t in s.items() if k != "step" and torch.is_tensor(t)]
                )
                steps.append(dict(record))

            wrap_step(optimizer, before, after)
            return optimizer

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
        error = api.call(fn, [model, loader, scenario.loss_fn, make_optimizer, int(params["rank"])])
        base_grads.append(sum(p.grad is not None for p in weights))
        data = {
            "steps": steps,
            "base_grads": base_grads,
            "optimizers": optimizers[:16],
            "final_params": flat(weights),
        }
        if wide is not None and error is None:
            error = _memory_run(api, fn, wide, lr, int(params["rank"]))
        return data, error

    return api.supervise(learner, alone=processes is None)


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
