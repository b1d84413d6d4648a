"""Harness of the "packing" kind (lesson 6, pack-the-batch): the learner's loop packs documents of
uneven length into rows of fixed length, with the loss over real labels only and attention kept
inside each document.

``train(model, loader, optimizer, row_len)`` runs one pass over the seeded float64 ``PackedLM``'s
batches, each a list of documents (1-D token tensors), with the plain SGD it is given. The
supervisor reads the parameters as each batch is fetched and at the end: the trajectory, which the
checks compare with each document trained alone. Each call of the model syncs too, with the number
of token positions it was given (``forward``): that number is sent by this harness's hook in the
child, which a program can rewrite, so it only fails a loop.

Then, where the exercise has one (``params["memory_vocab"]``), the memory run: ``train`` once more
on one batch of many short documents (``memory_run``: a ``PackedLM`` whose vocabulary makes each
row's logits MiB), between two syncs where the supervisor reads the kernel's figures of the
process's memory. Packed, the documents fill a few rows; each in a row of its own, or in a padded
slot of one long row, they take several times the logits. The supervisor reads the run's small
layers (positions, attention) at its end: a run that did not train as asked has no figure. The
child may start threads, never a process, which the kernel counts apart.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from . import childfilter, scenarios, sequences, supervise
from .instrument import flat, name_limits

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api


def memory_params(params: dict[str, Any]) -> dict[str, Any] | None:
    """The memory run's scenario (``sequences.packing``'s parameters), or None without one."""
    if not params.get("memory_vocab"):
        return None
    return {
        "seed": int(params.get("seed", 0)) + 1,
        "vocab": int(params["memory_vocab"]),
        "dim": int(params["dim"]),
        "row_len": int(params["memory_row_len"]),
        "min_doc": int(params["memory_min_doc"]),
        "max_doc": int(params["memory_max_doc"]),
        "docs_per_batch": int(params["memory_docs"]),
        "n_batches": 1,
        "lr": float(params["lr"]),
    }


def read_layers(model: sequences.PackedLM) -> list[torch.Tensor]:
    """The memory run's layers the supervisor reads at its end: small, and each moved by every
    document's every token."""
    return [model.position.weight, model.qkv.weight, model.qkv.bias, model.out.weight, model.out.bias]


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    device = spec.get("device", "cpu")
    mem = memory_params(params)
    if mem is not None:
        supervise.exact_malloc()  # before the models' blocks: the kernel's figures go by them
    model, batches = sequences.packing(params)
    model = model.to(device)
    batches = [[doc.to(device) for doc in batch] for batch in batches]
    weights = list(model.parameters())
    wide: sequences.PackedLM | None = None
    wide_batches: list[list[torch.Tensor]] = []
    if mem is not None:
        wide, wide_batches = sequences.packing(mem)
        wide = wide.to(device)
        wide_batches = [[doc.to(device) for doc in batch] for batch in wide_batches]
    api.share([*weights, *(read_layers(wide) if wide is not None else [])])
    processes = childfilter.prepare_processes() if mem is not None else None

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        def loader() -> Iterator[list[torch.Tensor]]:
            for i, batch in enumerate(batches):
                api.sync("batch", i, snapshot=True)
                yield list(batch)

        class Loader:
            def __len__(self) -> int:
                return len(batches)

            def __iter__(self) -> Iterator[list[torch.Tensor]]:
                return loader()

        def counted(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            tokens = args[0] if args else None
            positions = int(tokens.numel()) if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 else -1
            api.sync("forward", positions)  # token positions: rows of any length are counted whole

        forked = processes is not None and not torch.cuda.is_initialized()  # not inline on CUDA
        if wide is not None:
            _warm_up(wide, wide_batches[0], device)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
            if processes is not None and forked:
                childfilter.stack(processes)
        # on the token embedding, which every call runs with the tokens as they were given: a
        # right loop calling model.forward(...), or the model with keywords, runs no pre-hook of
        # the model's own with them (red team 4: both were refused)
        handle = model.embed.register_forward_pre_hook(counted)
        name_limits(alone=api.alone, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "optimizer", "row_len"])
        optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
        error = api.call(fn, [model, Loader(), optimizer, int(params["row_len"])])
        handle.remove()
        data = {"final_params": flat(weights)}
        if wide is not None and error is None:
            error = _memory_run(
                api, fn, wide, wide_batches, float(params["lr"]), int(params["memory_row_len"])
            )
        return data, error

    return api.supervise(learner)


def _memory_run(
    api: "Api", fn: Any, model: sequences.PackedLM, batches: list[list[torch.Tensor]], lr: float, row_len: int
) -> dict[str, Any] | None:
    """``train`` once more on the memory run's batch, between the syncs where the supervisor
    reads the kernel's figures of the process's memory; it reads the run's small layers at the
    end (``memory-end``)."""

    def served() -> Iterator[list[torch.Tensor]]:
        for i, batch in enumerate(batches):
            api.sync("memory-batch", i)
            yield list(batch)

    optimizer = torch.optim.SGD(list(model.parameters()), lr=lr)
    api.sync("memory-start")
    error = api.call(fn, [model, scenarios.ServedLoader(len(batches), served), optimizer, row_len])
    api.sync("memory-end", snapshot=True)
    return error


def _warm_up(model: sequences.PackedLM, documents: list[torch.Tensor], device: str) -> None:
    """A packed row's forward, loss and backward on a copy of a few of the memory run's layers
    at a tiny vocabulary, in the child before the supervisor watches its memory: torch's code
    that such a loop runs is paged in here, not counted as the learner's."""
    small = sequences.PackedLM(16, model.embed.embedding_dim, model.position.num_embeddings)
    small = small.to(device=device, dtype=model.embed.weight.dtype)
    doc = documents[0] % 16
    n = len(doc)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None]
    logits = small(doc[None], torch.arange(n, device=device)[None], mask)
    F.cross_entropy(logits[0, :-1], doc[1:], ignore_index=-100).backward()
