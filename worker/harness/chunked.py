"""Harness of the "chunked" kind (lesson 6, chunked-loss): the learner's loop computes a language
model's cross-entropy in chunks of its hidden states, so that the whole logits never exist.

``train(model, loader, optimizer, chunk_size)`` runs one pass over the seeded float64
``TinyLM``'s batches of ``(tokens, labels)`` with the plain SGD it is given. The supervisor reads
the parameters as each batch is fetched and at the end (the trajectory). Then, where the
exercise has one, the memory run: ``train`` once more on a float32 model with a vocabulary large
enough that its whole logits are tens of MiB, one batch, between two syncs where the supervisor
reads the mixing layer's parameters and the kernel's figures of the process's memory. The child
reports only the calls of ``lm_head`` (rows, and whether backward was running): what names a
mistake, never what makes a pass.
"""

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from . import childfilter, scenarios, sequences, supervise
from .instrument import flat, name_limits

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_CALLS = 2000

Wide = tuple[sequences.TinyLM, list[tuple[torch.Tensor, torch.Tensor]]]  # the memory run's model, batch


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    device = spec.get("device", "cpu")
    model, batches = sequences.chunked(params)
    model = model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    weights = list(model.parameters())
    lr = float(params["lr"])
    wide: Wide | None = None
    built = sequences.chunked_memory(params)
    if built is not None:  # the memory run's model: the kernel's figures go by it
        supervise.exact_malloc()
        wide = (built[0].to(device), [(x.to(device), y.to(device)) for x, y in built[1]])
    api.share(weights + (sequences.watched(wide[0]) if wide is not None else []))
    # with a memory run, the kernel's count of the child grades memory: the child may start
    # threads (a logging thread, the profiler's), never a process, which the kernel counts apart
    processes = childfilter.prepare_processes() if wide is not None else None

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        calls: list[list[Any]] = []  # [run, rows, during backward]
        state = {"run": 0}

        def noted(module: torch.nn.Module, args: Any, output: Any) -> None:
            if len(calls) < MAX_CALLS and isinstance(output, torch.Tensor) and output.dim() >= 1:
                rows = output.numel() // max(output.shape[-1], 1)
                backward = torch._C._current_autograd_node() is not None
                calls.append([state["run"], int(rows), bool(backward)])

        model.lm_head.register_forward_hook(noted)
        if wide is not None:
            wide[0].lm_head.register_forward_hook(noted)

        def served() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for i, batch in enumerate(batches):
                api.sync("batch", i, snapshot=True)
                yield batch

        if wide is not None:
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        forked = processes is not None and not torch.cuda.is_initialized()  # not inline on CUDA
        if processes is not None and forked:
            childfilter.stack(processes)
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "optimizer", "chunk_size"])
        optimizer = torch.optim.SGD(weights, lr=lr)
        loader = scenarios.ServedLoader(len(batches), served)
        error = api.call(fn, [model, loader, optimizer, int(params["chunk_size"])])
        final = flat(weights)
        if wide is not None and error is None:
            state["run"] = 1
            error = _memory_run(api, fn, wide, lr, int(params["memory_chunk"]))
        return {"calls": calls, "final_params": final}, error

    return api.supervise(learner, alone=processes is None)


def _memory_run(
    api: "Api", fn: Callable[..., Any], wide: Wide, lr: float, chunk_size: int
) -> dict[str, Any] | None:
    """``train`` once more, on the large vocabulary's model and its one batch, with a plain SGD,
    between two syncs where the supervisor reads the mixing layer and the kernel's figures of
    the process's memory: what a pass on the logits' peak rests on."""
    model, batches = wide
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    api.sync("memory-start", snapshot=True)
    error = api.call(fn, [model, scenarios.Loader(batches), optimizer, chunk_size])
    api.sync("memory-end", snapshot=True)
    return error
