"""Harness of the "hookstep" kind (lesson 5): the learner's loop updates each parameter
in its ``register_post_accumulate_grad_hook``, so that one parameter's gradient is alive at a time.

``train(model, loader, loss_fn, make_optimizer)`` runs one pass over the seeded float64 MLP's
batches; ``make_optimizer(params)`` is the Adam the learner must use (one per parameter). The
supervisor reads the parameters as each batch is fetched and at the end (the trajectory); the
child reports every optimizer step: the batch, whether backward was running, which of the
optimizer's parameters had a gradient, and how many gradients (and bytes) were alive then; and
how many were alive as each batch was fetched (after the previous backward).
"""

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from . import childfilter, memory, scenarios, supervise
from .instrument import flat, name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_STEPS = 2000

Wide = tuple[nn.Sequential, list[scenarios.Batch], nn.Module]  # the memory run's model, batches, loss


def _alive(weights: list[torch.Tensor]) -> tuple[int, int]:
    grads = [p.grad for p in weights if p.grad is not None]
    return len(grads), sum(g.numel() * g.element_size() for g in grads)


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    device = spec.get("device", "cpu")
    scenario, weights, index = scenarios.placed(params, device)
    model, batches = scenario.model, scenario.micro_batches
    lr = float(params["lr"])
    wide: Wide | None = None
    built = memory.wide_scenario(params)
    if built is not None:  # the memory run's model: the kernel's figures go by it
        supervise.exact_malloc()
        wide = (built[0].to(device), [(x.to(device), y.to(device)) for x, y in built[1]], built[2])
    # after the scenario's parameters, the memory run's biases (its weights, 8 MiB each, would
    # not fit in a trace): each moves only where its layer's gradient reached it (the checks
    # part them)
    api.share(weights + (memory.biases(wide[0]) if wide is not None else []))
    # with a memory run, the kernel's count of the child grades memory: the child may start
    # threads (a logging thread, the profiler's), never a process, which the kernel counts apart
    processes = childfilter.prepare_processes() if wide is not None else None

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        steps: list[list[Any]] = []
        between: list[int] = []
        state = {"batch": -1}

        def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
            group = list(group)
            optimizer = torch.optim.Adam(group, lr=lr)
            owned = [index.get(id(p), -1) for p in group]

            def recorded() -> None:
                if len(steps) < MAX_STEPS:
                    alive, nbytes = _alive(weights)
                    stepped = [i for i, p in zip(owned, group, strict=True) if p.grad is not None]
                    backward = torch._C._current_autograd_node() is not None
                    steps.append([state["batch"], backward, stepped, alive, nbytes])

            wrap_step(optimizer, recorded)
            return optimizer

        def served() -> Iterator[scenarios.Batch]:
            for i, batch in enumerate(batches):
                between.append(_alive(weights)[0])
                api.sync("batch", i, snapshot=True)
                state["batch"] = i
                yield batch

        if wide is not None:
            # the wide weights in pages of the child's own: Adam's first write to pages shared
            # with the supervisor would copy them inside the run, where the job's cgroup counts them
            scenarios.own_pages(p for p in wide[0].parameters() if p.dim() > 1)
            _warm_up(model, batches[0], scenario.loss_fn, lr)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        forked = processes is not None and not torch.cuda.is_initialized()  # not inline on CUDA
        if processes is not None and forked:
            childfilter.stack(processes)
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer"])
        loader = scenarios.ServedLoader(len(batches), served)
        error = api.call(fn, [model, loader, scenario.loss_fn, make_optimizer])
        between.append(_alive(weights)[0])
        final = flat(weights)
        if wide is not None and error is None:
            error = _memory_run(api, fn, wide, lr)
        data = {
            "steps": steps,
            "between": between,
            "n_params": len(weights),
            "grad_bytes": sum(p.numel() * p.element_size() for p in weights),
            "final_params": final,
        }
        return data, error

    return api.supervise(learner, alone=processes is None)


def _warm_up(model: nn.Module, batch: scenarios.Batch, loss_fn: nn.Module, lr: float) -> None:
    """A plain Adam step and one stepped in each parameter's hook, on a copy of the scenario's
    model, in the child before the supervisor watches its memory: torch's code that such loops
    run is paged in and its lazy state made here (22 MiB of the process's pages at the first
    backward), not counted as the learner's."""
    model = copy.deepcopy(model)
    weights = list(model.parameters())
    plain = torch.optim.Adam(weights, lr=lr)
    loss_fn(model(batch[0]), batch[1]).backward()
    plain.step()
    plain.zero_grad(set_to_none=True)
    optimizers: dict[torch.Tensor, torch.optim.Optimizer] = {p: torch.optim.Adam([p], lr=lr) for p in weights}

    def step(p: torch.Tensor) -> None:
        optimizers[p].step()
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(step) for p in weights]
    loss_fn(model(batch[0]), batch[1]).backward()
    for handle in handles:
        handle.remove()


def _memory_run(api: "Api", fn: Callable[..., Any], wide: Wide, lr: float) -> dict[str, Any] | None:
    """``train`` once more, on the wide model and its batches, each ``make_optimizer`` a plain
    Adam, between two syncs where the supervisor reads the parameters and the kernel's figures
    of the process's memory (``Observer.watch``): what a pass on live gradients rests on."""
    model, batches, loss_fn = wide

    def make_optimizer(group: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.Adam(list(group), lr=lr)

    api.sync("memory-start", snapshot=True)
    error = api.call(fn, [model, scenarios.Loader(batches), loss_fn, make_optimizer])
    api.sync("memory-end", snapshot=True)
    return error
