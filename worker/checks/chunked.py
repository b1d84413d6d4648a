"""Checks of the "chunked" kind (lesson 6, chunked-loss).

The reference is the whole loss — the logits of every token at once, cross-entropy averaged over
the real tokens, one plain SGD step per batch — on the same seeded float32 ``TinyLM`` of the one
run (``harness.chunked.the_run``: a vocabulary wide enough that a chunk's logits take MiB), here
on the CPU. The learner's loop runs once (issue 41: a program that told a small maths run from a
wide memory run built the whole logits where memory was not counted). It passes when the
parameters after every batch, as the sandbox's supervisor read them (``hookstep.Sampled``: the
biases whole and each weight at places it drew after the fork), are where the reference puts
them, and the process's memory, as the kernel counted it, rose by less than what chunks of
``chunk_size`` rows need, their cross-entropy written any right way (``KERNEL_BASE`` +
``KERNEL_CHUNKS`` × one chunk's logits: room for a hand-written one's intermediates, red team 6),
far under the first batch's whole logits.

Mistakes are named by what the supervisor saw: each known wrong loss is recomputed here (trusted
code, the same scenario) and the one whose trajectory the learner's parameters follow is named.
The memory mistakes train right; the calls of ``lm_head`` the child reported (rows, and whether
backward was running) tell which one it was, after the kernel's figure failed the check, and a
call on more rows than ``chunk_size`` fails the loop (never passes one).
"""

# ruff: noqa: F405  (the kit's names, from worker/checks/kit.py)

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from contracts.messages import Sci
from contracts.verdict import chart
from worker.checks.kit import *  # noqa: F403  (worker/checks/kit.py)
from worker.harness import chunked as harness
from worker.harness import hookstep, sequences
from worker.harness.protocol import reported

# relative parameter error, against how far the reference moved the parameters read: the chunks'
# sum differs from the whole loss in float32's order of additions (measured: 0 to 2.5e-7 for right
# loops in six styles, 1.8e-6 for a hand-written softmax gradient); a chunk weighed wrong, padding
# counted or the last chunk left out is off by 0.08, 0.15 and 0.57, and the whole softmax kept at
# once in float16 (31 MiB, under the memory line) by 6.5e-5: 2e-5 refuses it (red team 5)
TOLERANCE = {"cpu": 2e-5, "cuda": 1e-3}
# a known mistake is named when the learner's parameters follow its recomputed trajectory this close
NAMED = 1e-3
# The run's memory as the kernel counts the process's rise (a first batch of 2,000 tokens × 16,384
# words: one chunk of 128 rows' logits 8 MiB, the whole logits 125 MiB, 15.6 chunks' worth; a
# second of 500), measured on the CPU under `treino check`. How many chunks' logits a right loop
# holds at its peak depends on how it writes the cross-entropy, not on a mistake: F.cross_entropy
# under checkpoint, log_softmax and gather or nll_loss, 28.6-29.3 MiB (about three, and 4.6 MiB
# besides); a max-exp-log by hand 29.3 checkpointed, 36.8 with each chunk's own backward; a
# one-hot target 37.0 checkpointed; logsumexp minus the label's logit (through lm_head, a matmul
# on its weight, a float() upcast, a boolean mask), checkpointed or each chunk's own backward,
# 44.7-47.8 (five); a log-softmax by hand (logits - logsumexp, then gather) or a one-hot target,
# each chunk's own backward with the last chunk's tensors still in their variables, 52.6 (six).
# The wrong ones: every chunk's graph kept for one backward 139.9 (F.cross_entropy) and 161.5 (by
# hand), every chunk's logits in a list 268.5, the whole logits 377.5-627.8. The line, 8 MiB + 8
# chunks' logits = 72 MiB, is 19 MiB over the most a right loop held and 53 MiB under the whole
# logits alone. Red team 6: on chunks of 256 rows (16 MiB) and a line of 8 MiB + 4 chunks', the
# hand-written loops rose 84.6-101.0 MiB and were refused, and no line parted them from the
# whole logits (125 MiB) by a margin there. The line bounds bytes, not rows: F.cross_entropy holds half what
# a hand-written loss does, so its chunks of 1.5 × or 2 × ``chunk_size`` fit under it too;
# lm_head's report fails such chunks where it sees them, nothing else does
KERNEL_BASE = 8 << 20
KERNEL_CHUNKS = 8.0
# What a loop may hold from before its run, since the supervisor began to watch (as the learner's
# file was loaded; the harness pages torch's code in before that): the learner's module, torch's
# lazily made state (measured: 0.25 MiB over the rise for the solution). A loop that holds memory
# into the run and frees it there (a ballast) lowers the rise by as much, never this
HELD = 6 << 20

Loss = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, int], torch.Tensor]


def _split(model, x, y, rows):
    h, t = model.hidden(x).flatten(0, 1), y.flatten()
    return list(zip(h.split(rows), t.split(rows), strict=True)), t


def _chunk_sum(model, h, t):
    return F.cross_entropy(model.lm_head(h), t, reduction="sum", ignore_index=sequences.IGNORE_INDEX)


def _sum(model, h, t):
    """A chunk's summed loss, its logits made again in backward (the worker holds one at a time)."""
    return checkpoint(_chunk_sum, model, h, t, use_reentrant=False)


def _chunk_mean(model, h, t):
    return F.cross_entropy(model.lm_head(h), t, ignore_index=sequences.IGNORE_INDEX)


def whole_loss(model, x, y, rows):
    """The whole loss, computed in chunks of ``rows`` (the same value and gradients: the sum's
    order of additions aside)."""
    chunks, t = _split(model, x, y, rows)
    return sum(_sum(model, h, c) for h, c in chunks) / (t != sequences.IGNORE_INDEX).sum()


def _chunks_not_weighted(model, x, y, rows):
    """The mean of the chunks' mean losses: a chunk with few real tokens weighs as a full one."""
    chunks, _ = _split(model, x, y, rows)
    means = [checkpoint(_chunk_mean, model, h, t, use_reentrant=False) for h, t in chunks]
    return torch.stack(means).mean()


def _padding_counted(model, x, y, rows):
    """The chunks' summed losses divided by every position, padding included."""
    chunks, t = _split(model, x, y, rows)
    return sum(_sum(model, h, c) for h, c in chunks) / t.numel()


def _tail_dropped(model, x, y, rows):
    """Only the full chunks (``range(n // chunk_size)``): the last, shorter one is left out."""
    chunks, t = _split(model, x, y, rows)
    full = [(h, c) for h, c in chunks if h.shape[0] == rows]
    total = sum((_sum(model, h, c) for h, c in full), torch.zeros((), dtype=chunks[0][0].dtype))
    return total / (t != sequences.IGNORE_INDEX).sum()


# the wrong losses that train differently, by diagnosis id
MATHS_MISTAKES: dict[str, Loss] = {
    "chunks-not-weighted": _chunks_not_weighted,
    "padding-counted": _padding_counted,
    "tail-dropped": _tail_dropped,
}


@dataclass(frozen=True)
class Reference:
    params: list[torch.Tensor]  # every parameter flattened, one after another: at the start, after each batch
    sizes: list[int]  # each parameter's values


def _trajectory(params: dict, loss: Loss, rows: int) -> Reference:
    model, batches = harness.the_run(params)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    after = [tensors.flat(weights)]
    for x, y in batches:
        loss(model, x, y, rows).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(weights))
    return Reference(after, [p.numel() for p in weights])


@lru_cache(maxsize=8)
def _cached(key: str, name: str, rows: int) -> Reference:
    params = json.loads(key)
    return _trajectory(params, whole_loss if name == "reference" else MATHS_MISTAKES[name], rows)


def trajectory(params: dict, name: str = "reference", rows: int = 0) -> Reference:
    """The parameters at the start and after each batch under the whole loss (``reference``) or
    a known wrong one, chunked by ``rows`` (the exercise's ``chunk_size`` where 0)."""
    rows = rows or int(params["chunk_size"])
    with SEEDING:
        return _cached(json.dumps(params, sort_keys=True), name, rows)


def prepare(params: dict, device: str) -> None:
    trajectory(params)
    for name in MATHS_MISTAKES:  # judging then only recomputes a chunk size of the learner's own
        trajectory(params, name)


def read_sampled(shot: object, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """A snapshot of ``hookstep.Sampled``: the places it read (into the parameters flattened one
    after another), rebuilt from its seed, and the values there. The supervisor's own reading;
    one of another shape was not made by it."""
    if not (isinstance(shot, list) and shot and isinstance(shot[0], float) and shot[0].is_integer()):
        raise Interfered("shape", detail="a snapshot of the parameters does not have the supervisor's shape")
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    own = hookstep.places(int(shot[0]), sizes)
    found = torch.cat([p + o for p, o in zip(own, offsets, strict=True)])
    if len(shot) != 1 + found.numel():
        raise Interfered("shape", detail="a snapshot of the parameters does not have the supervisor's shape")
    return found, tensors.vector(shot[1:])


Read = tuple[torch.Tensor, torch.Tensor]  # the places read (into the parameters flattened), the values


def _after(seen: dict, sizes: list[int], expected: int) -> tuple[list[Read], int]:
    """The parameters after each optimizer step, as the supervisor read them (places, values),
    the first ``expected`` of them, and how many steps the loop took. Read at the step (red
    team 5): read at the next batch's fetch, a right loop that took its batches first
    (``list(loader)``, a prefetch) was read before it stepped."""
    taken = int(seen["counts"].get("step", 0))
    shots = snapshots(seen, "step")[:expected]
    if len(shots) < min(taken, expected):
        raise Interfered("shape", detail="a step's parameters were not read")
    return [read_sampled(shot, sizes) for shot in shots], taken


def _errors(after: list[tuple[torch.Tensor, torch.Tensor]], ref: Reference) -> list[float]:
    """Each batch's distance from ``ref`` at the places read, relative to how far ``ref`` had
    moved them from the start."""
    start = ref.params[0]
    errors = []
    for (places, values), r in zip(after, ref.params[1:], strict=True):
        travelled = max(tensors.norm(r[places] - start[places]), 1e-30)
        errors.append(tensors.norm(values.nan_to_num() - r[places]) / travelled)
    return errors


def _well_formed(data: dict) -> None:
    """What the child reported has the harness's shape, or the run was tampered with."""
    calls = reported(data, "calls")
    ok = isinstance(calls, list)
    for call in calls if isinstance(calls, list) else []:
        ok = ok and isinstance(call, list) and len(call) == 3 and type(call[2]) is bool
        ok = ok and all(type(v) is int for v in call[:2])
    if not ok:
        raise Interfered("shape", detail="the reported lm_head calls do not have the harness's shape")


def _trajectory_check(
    params: dict, after: list[tuple[torch.Tensor, torch.Tensor]], taken: int, tol: float
) -> tuple[Check, list[float]]:
    ref = trajectory(params)
    if taken != len(ref.params) - 1 or len(after) != taken:
        counts = {"batches": taken, "expected": len(ref.params) - 1}
        return Check("chunked-trajectory", False, "check.chunked-trajectory.batches", counts), []
    errors = _errors(after, ref)
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values = {"batch": bad + 1, "error": Sci(errors[bad])}
        return Check("chunked-trajectory", False, "check.chunked-trajectory.failed", values), errors
    passed = Check("chunked-trajectory", True, "check.chunked-trajectory.passed", {"error": Sci(max(errors))})
    return passed, errors


def limit(params: dict) -> int:
    """The most a loop in chunks of ``chunk_size`` rows may raise the process's memory by."""
    return KERNEL_BASE + int(KERNEL_CHUNKS * harness.logits_bytes(params, int(params["chunk_size"])))


def kernel_check(params: dict, data: dict, trained: bool) -> Check | None:
    """The run's memory as the kernel counted the process (None on CUDA, where no child is
    watched): its rise within ``limit`` from the run's start and, ``HELD`` more, from the
    learner's file's load, once the parameters the supervisor read ended where the whole loss
    puts them (``trained``): a run that did not train as asked has no memory figure to go by.
    What the loop's process reported names the mistake; this is what a pass rests on."""
    seen = observed(data)
    if not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    line = limit(params)
    values = {
        "rise": rise,
        "limit": line,
        "logits": harness.logits_bytes(params),
        "chunk": harness.logits_bytes(params, int(params["chunk_size"])),
        "chunk_size": int(params["chunk_size"]),
        "tokens": int(params["batch_size"]) * int(params["seq_len"]),
        "vocab": int(params["vocab"]),
        "since": since,
        "held": line + HELD,
    }
    if not trained:
        return Check("logits_kernel", False, "check.logits_kernel.untrained", values)
    if rise > line:
        return Check("logits_kernel", False, "check.logits_kernel.failed", values)
    if since > line + HELD:
        return Check("logits_kernel", False, "check.logits_kernel.held", values)
    return Check("logits_kernel", True, "check.logits_kernel.passed", values)


def _chunk_rows(params: dict, calls: list) -> list[int]:
    """The chunk sizes to recompute the wrong losses with: the exercise's, and the rows of the
    first call of ``lm_head`` in the first batch's forward, as the child reported it (a hint:
    a wrong loss is named only where the parameters follow it)."""
    rows = [int(params["chunk_size"])]
    first = next((r for _run, r, backward in calls if not backward), None)
    if (
        first is not None
        and 0 < first < int(params["batch_size"]) * int(params["seq_len"])
        and first not in rows
    ):
        rows.append(first)
    return rows


def _named_by_trajectory(params: dict, after: list, calls: list) -> Diagnosis | None:
    """The known wrong loss whose recomputed trajectory the observed parameters follow."""
    best: tuple[float, str, int] | None = None
    for name in MATHS_MISTAKES:
        for rows in _chunk_rows(params, calls):
            ref = trajectory(params, name, rows)
            if len(ref.params) - 1 != len(after):
                continue
            worst = max(_errors(after, ref))
            if math.isfinite(worst) and worst <= NAMED and (best is None or worst < best[0]):
                best = (worst, name, rows)
    if best is None:
        return None
    _worst, name, rows = best
    whole, mine = trajectory(params).params, trajectory(params, name, rows).params
    ratio = tensors.norm(mine[1] - mine[0]) / max(tensors.norm(whole[1] - whole[0]), 1e-300)
    return Diagnosis(name, {"rows": rows, "ratio": round(ratio, 2)})


def _named_by_memory(params: dict, calls: list, rise: int) -> Diagnosis | None:
    """The memory mistake the reported calls of ``lm_head`` show, where the kernel's figure
    (``rise``, which already failed the check) bears it out. ``graph-kept-across-chunks`` only
    where the rise reached the first batch's whole logits: every chunk's saved log-softmax (or
    logits) alive until one backward adds up to them. A call of ``lm_head`` only in forward is
    also what a right loop that runs each chunk's own backward reports (red team 6: a
    hand-written cross-entropy per chunk, each chunk's backward at once, was named so on a rise
    of 100.5-103 MiB, under the 125 MiB of the whole logits): the report alone names nothing."""
    tokens = int(params["batch_size"]) * int(params["seq_len"])
    forward = [r for _run, r, backward in calls if not backward]
    again = [r for _run, r, backward in calls if backward]
    if forward and max(forward) >= tokens:
        return Diagnosis("whole-logits-built", {"rows": max(forward), "tokens": tokens})
    if forward and not again and rise >= harness.logits_bytes(params):
        return Diagnosis("graph-kept-across-chunks", {"chunks": len(forward), "rows": max(forward)})
    return None


def _oversized(params: dict, calls: list) -> Check | None:
    """A failing line where the program's own report says it called ``lm_head`` on more rows at
    once than ``chunk_size``: it names chunks too large where the kernel's line did not fail
    them (slightly larger chunks, a loop lean elsewhere). What the child reports may fail a
    loop, never pass one: the kernel's line is what holds a chunk half again as large (or a
    call that no hook sees) to the size asked. None where it reports nothing too large."""
    chunk, tokens = int(params["chunk_size"]), int(params["batch_size"]) * int(params["seq_len"])
    rows = max((r for _run, r, backward in calls if not backward), default=0)
    if rows > chunk:
        values = {"rows": rows, "chunk_size": chunk, "tokens": tokens}
        return Check("chunked-size", False, "check.chunked-size.failed", values)
    return None


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    _well_formed(data)
    ref = trajectory(params)
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    after, taken = _after(seen, ref.sizes, len(ref.params) - 1)
    trajectory_check, errors = _trajectory_check(params, after, taken, tol)
    checks = [trajectory_check]
    kernel = kernel_check(params, data, bool(errors) and errors[-1] <= tol)
    if kernel is not None:
        checks.append(kernel)
    calls = reported(data, "calls")  # lm_head's calls: they only name a mistake, or fail one
    oversized = _oversized(params, calls)
    if oversized is not None:
        checks.append(oversized)
    metrics: dict = {"batches": taken}
    if kernel is not None:  # drawn by the page as chunked.yaml's figure.logits says
        v = kernel.values
        metrics["charts"] = [
            chart(
                "logits",
                "bytes",
                [
                    ("yours", "yours", v["rise"]),
                    ("budget", "reference", v["limit"]),
                    ("whole", "naive", v["logits"]),
                ],
            )
        ]
    diagnosis = None
    if not checks[0].passed:
        diagnosis = _named_by_trajectory(params, after, calls) if taken == len(ref.params) - 1 else None
    elif kernel is not None and not kernel.passed and not kernel.message.endswith("untrained"):
        diagnosis = _named_by_memory(params, calls, int(kernel.values["rise"]))
    elif oversized is not None and oversized.values["rows"] >= oversized.values["tokens"]:
        diagnosis = Diagnosis(
            "whole-logits-built", {"rows": oversized.values["rows"], "tokens": oversized.values["tokens"]}
        )
    return Evaluation(checks, diagnosis, metrics)


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
