"""Harness of the "chunked" kind (lesson 6, chunked-loss): the learner's loop computes a language
model's cross-entropy in chunks of its hidden states, so that the whole logits never exist.

``train(model, loader, optimizer, chunk_size)`` runs once (issue 41: a program that told a small
maths run from a wide memory run built the whole logits where memory was not counted), over
``n_batches`` batches of ``(tokens, labels)`` of a float32 ``TinyLM`` whose vocabulary is wide
enough that one chunk's logits take MiB (``the_run``, built here: sequences' memory run is one
batch without a short last chunk), with the plain SGD it is given. The supervisor reads the
parameters after each of the optimizer's steps and at the end (``hookstep.Sampled``: the biases
whole, and of each weight the values at places it draws after the fork), and the kernel's figures
of the process's memory between the run's two syncs: what a pass rests on. Read at the step, not
at the next fetch (red team 5): a right loop that takes its batches first (``list(loader)``, a
prefetch) is read after each step as any other. The child reports only the
calls of ``lm_head`` (rows, and whether backward was running): what names a mistake, or fails
the loop, never what makes a pass.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from . import childfilter, scenarios, sequences, supervise
from .hookstep import Sampled
from .instrument import name_limits, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_CALLS = 2000
# the steps after which the supervisor reads the parameters: a run's batches and one more (a
# loop that steps more often is refused on the count, which the supervisor keeps whole)
READ_STEPS = 16


def the_run(params: dict[str, Any]) -> tuple[sequences.TinyLM, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The one run's float32 ``TinyLM`` (``vocab`` words, ``dim`` wide) and its ``n_batches``
    batches of ``batch_size`` rows of ``seq_len`` tokens (the last of ``last_batch_size`` rows
    where given: a short batch after the wide one costs little and still shows a gradient
    carried over), each row but the last ending in 0 to
    ``most_padding`` padding labels, seeded by ``params["seed"]``. The same here, in the
    supervisor, and in the checks."""
    torch.manual_seed(int(params.get("seed", 0)))
    vocab = int(params["vocab"])
    model = sequences.TinyLM(vocab, int(params["dim"]))
    length, padding, n = int(params["seq_len"]), int(params.get("most_padding", 3)), int(params["n_batches"])
    rows = [int(params["batch_size"])] * n
    rows[-1] = int(params.get("last_batch_size", rows[-1]))
    batches = [sequences._batch(vocab, r, length, padding) for r in rows]
    return model, batches


def logits_bytes(params: dict[str, Any], rows: int | None = None) -> int:
    """The bytes of ``rows`` token positions' float32 logits (every position of a full batch
    where None)."""
    if rows is None:
        rows = int(params["batch_size"]) * int(params["seq_len"])
    return rows * int(params["vocab"]) * 4


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (the layout it will read, through ``Sampled``: the model's shapes
    alone, ``sequences.TinyLM.layout``); the child builds the run (``set_up``, before the
    learner's file is loaded), hands its parameters over and runs the learner's loop."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    lr = float(params["lr"])
    layout = sequences.TinyLM.layout(int(params["vocab"]), int(params["dim"]), "float32")
    # the kernel's count of the child grades memory: the child may start threads (a logging
    # thread, the profiler's), never a process, which the kernel counts apart
    processes = childfilter.prepare_processes()

    def set_up() -> tuple[Any, ...]:
        supervise.exact_malloc()  # before the model's blocks: the kernel's figures go by them
        model, batches = the_run(params)
        model = model.to(device)
        batches = [(x.to(device), y.to(device)) for x, y in batches]
        weights = list(model.parameters())
        api.hand_off(weights)  # the supervisor reads them in the shared memory (``Sampled``)
        return model, batches, weights

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, batches, weights = set_up()
        calls: list[list[Any]] = []  # [run, rows, during backward]; one run: run is always 0

        def noted(module: torch.nn.Module, args: Any, output: Any) -> None:
            if len(calls) < MAX_CALLS and isinstance(output, torch.Tensor) and output.dim() >= 1:
                rows = output.numel() // max(output.shape[-1], 1)
                backward = torch._C._current_autograd_node() is not None
                calls.append([0, int(rows), bool(backward)])

        def served() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for i, batch in enumerate(batches):
                api.sync("batch", i)
                yield batch

        steps = {"taken": 0}

        def stepped(result: object) -> None:
            # the parameters after this step, read by the supervisor: whatever order the loop
            # fetched its batches in
            api.sync("step", steps["taken"], snapshot=steps["taken"] < READ_STEPS)
            steps["taken"] += 1

        with torch.no_grad():  # the shared pages in this process's page tables before the watch
            for p in weights:
                p.sum()
        _warm_up(batches[0], device)
        model.lm_head.register_forward_hook(noted)
        scenarios.settle()
        api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        forked = not api.inline
        if forked:
            childfilter.stack(processes)
        name_limits(alone=api.alone or forked, kernel=True)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "optimizer", "chunk_size"])
        optimizer = torch.optim.SGD(weights, lr=lr)
        wrap_step(optimizer, after=stepped)
        loader = scenarios.ServedLoader(len(batches), served)
        api.sync("memory-start", snapshot=True)
        error = api.call(fn, [model, loader, optimizer, int(params["chunk_size"])])
        api.sync("memory-end", snapshot=True)
        return {"calls": calls}, error

    return api.supervise(learner, alone=False, layout=layout, device=device, reading=Sampled)


def _warm_up(batch: tuple[torch.Tensor, torch.Tensor], device: str) -> None:
    """A few losses in chunks (checkpointed, each chunk's own backward, log-softmax and gather) and
    a whole one, on a narrow ``TinyLM`` (64 words, 8 wide) and a few rows, with an SGD step, in
    the child before the supervisor watches its memory: torch's code that such loops run is
    paged in and its lazy state made here, not counted as the learner's."""
    narrow = sequences.TinyLM(64, 8).to(device)
    optimizer = torch.optim.SGD(narrow.parameters(), lr=0.1)
    x, y = batch[0][:2, :16] % 64, batch[1][:2, :16].clone()
    y[y >= 0] %= 64
    h, t = narrow.hidden(x).flatten(0, 1), y.flatten()

    def part(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(narrow.lm_head(h), t, reduction="sum", ignore_index=sequences.IGNORE_INDEX)

    total = sum(
        checkpoint(part, a, b, use_reentrant=False) for a, b in zip(h.split(8), t.split(8), strict=True)
    )
    assert isinstance(total, torch.Tensor)
    total.backward()
    logp = F.log_softmax(narrow(x).flatten(0, 1), dim=-1)
    keep = t != sequences.IGNORE_INDEX
    (-logp[keep].gather(1, t[keep].unsqueeze(1)).sum()).backward()
    hidden = narrow.hidden(x).flatten(0, 1).detach().requires_grad_()
    part(hidden, t).backward()
    narrow.hidden(x).flatten(0, 1).backward(hidden.grad)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
