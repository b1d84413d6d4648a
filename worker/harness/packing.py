"""Harness of the "packing" kind (lesson 6, pack-the-batch): the learner's loop packs documents of
uneven length into rows of fixed length, with the loss over real labels only and attention kept
inside each document.

``train(model, loader, optimizer, row_len)`` runs once (red team 5: a program that told a small
maths run from a second, wide memory run gave each document a padded row of its own where memory
was not counted), over the seeded float64 ``PackedLM``'s batches, each a list of documents (1-D
token tensors), with the plain SGD it is given. Where the exercise counts memory
(``params["kernel_memory"]``) the vocabulary makes each row's logits MiB: packed, a batch's
documents fill a few rows; each in a row of its own, or in a padded slot of one long row, they
take several times the logits, and the kernel's figures of the process's memory between the
run's two syncs tell them apart.

The supervisor reads the parameters after each of the optimizer's steps and at the end
(``hookstep.Sampled``: the small ones whole, and of each large one the values at places it draws
after the fork): read at the step, whatever order the loop fetched its batches in (red team 5: a
right loop that packed every batch first was read before it stepped). Each call of the model's
token embedding syncs too, with the number of token positions it was given (``forward``): that
number is sent by this harness's hook in the child, which a program can rewrite or call for
show, so it only fails a loop. The child may start threads, never a process, which the kernel
counts apart.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from . import childfilter, scenarios, sequences, supervise
from .hookstep import Sampled
from .instrument import name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

# the steps after which the supervisor reads the parameters: a run's batches and more (a loop
# that steps more often is refused on the count, which the supervisor keeps whole)
READ_STEPS = 16


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (the layout it will read, through ``Sampled``: the model's shapes
    alone, ``sequences.PackedLM.layout``); the child builds the run (``set_up``, before the
    learner's file is loaded), hands its parameters over and runs the learner's loop."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    kernel = bool(params.get("kernel_memory"))
    length = int(params["row_len"])
    layout = sequences.PackedLM.layout(int(params["vocab"]), int(params["dim"]), length, "float64")
    processes = childfilter.prepare_processes() if kernel else None

    def set_up() -> tuple[Any, ...]:
        if kernel:
            supervise.exact_malloc()  # before the model's blocks: the kernel's figures go by them
        model, batches = sequences.packing(params)
        model = model.to(device)
        batches = [[doc.to(device) for doc in batch] for batch in batches]
        weights = list(model.parameters())
        api.hand_off(weights)  # the supervisor reads them in the shared memory (``Sampled``)
        return model, batches, weights

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, batches, weights = set_up()

        def loader() -> Iterator[list[torch.Tensor]]:
            for i, batch in enumerate(batches):
                api.sync("batch", i)
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

        steps = {"taken": 0}

        def stepped(result: object) -> None:
            api.sync("step", steps["taken"], snapshot=steps["taken"] < READ_STEPS)
            steps["taken"] += 1

        forked = processes is not None and not api.inline
        if kernel:
            with torch.no_grad():  # the shared pages in this process's page tables before the watch
                for p in weights:
                    p.sum()
            _warm_up(model, batches[0], device)
            scenarios.settle()
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
            if processes is not None and forked:
                childfilter.stack(processes)
        # on the token embedding, which every call runs with the tokens as they were given: a
        # right loop calling model.forward(...), or the model with keywords, runs no pre-hook of
        # the model's own with them (red team 4: both were refused)
        model.embed.register_forward_pre_hook(counted)
        name_limits(alone=api.alone or forked, kernel=processes is not None)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "optimizer", "row_len"])
        optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
        wrap_step(optimizer, after=stepped)
        if kernel:
            api.sync("memory-start", snapshot=True)
        error = api.call(fn, [model, Loader(), optimizer, length])
        if kernel:
            api.sync("memory-end", snapshot=True)
        return {}, error

    return api.supervise(learner, alone=False, layout=layout, device=device, reading=Sampled)


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
