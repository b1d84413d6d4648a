"""Checks of the "chunked" kind (lesson 6, chunked-loss).

The reference is the whole loss — the logits of every token at once, cross-entropy averaged over
the real tokens, one plain SGD step per batch — on the same seeded float64 ``TinyLM``, here on
the CPU. The learner passes when the parameters after every batch, read by the sandbox's
supervisor, equal the reference's, and when, run once more on a model whose whole logits are
tens of MiB, the loop trained as one SGD step does and the process's memory, as the kernel
counted it, rose by less than ``KERNEL_FACTOR`` × those logits' bytes.

Mistakes are named by what the supervisor saw: each known wrong loss is recomputed here (trusted
code, the same scenario) and the one whose trajectory the learner's parameters follow is named.
The memory mistakes train right; the calls of ``lm_head`` the child reported (rows, and whether
backward was running) tell which one it was, after the kernel's figure failed the check.
"""

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
from worker.checks import (
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    Interfered,
    agree,
    kernel_memory,
    observed,
    snapshots,
    tensors,
)
from worker.harness import sequences
from worker.harness.protocol import reported

# relative parameter error: a chunked sum differs from the whole loss in the order of its
# additions (float64: ~1e-15); a chunk weighed wrong or padding counted is off by ≥ 1e-3
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}
# a known mistake is named when the learner's parameters follow its recomputed trajectory this close
NAMED = 1e-6
# The memory run (``sequences.chunked_memory``: 2,048 tokens × 8,192 words, 64 MiB of float32
# logits), as the kernel counts the process's rise: chunks of 256 rows under checkpoint 28.7 MiB,
# each chunk's loss backward on its own 28.0; without checkpoint 82.1, the whole logits split
# after lm_head 130–148, the whole loss 194 (measured on the CPU, a fresh process each); the line
KERNEL_FACTOR = 0.75
# What a loop may hold from before the memory run, since the supervisor began to watch (as the
# learner's file was loaded): the maths run's first backward, torch's lazily loaded code, the
# learner's module (measured: 21-27 MiB for right loops). Read from there, a loop's rise counts
# memory it held before the run and freed during it: a decoy of 300 MiB freed as the run began,
# then the whole logits built under the mark it had raised, read 0 B from the run's start and
# 322 MiB from there (right loops 42-54 MiB, every chunk's graph kept 104)
HELD = 32 << 20
# how far the memory run's mixing layer may be from one SGD step's on the whole loss, relative to
# how far that step moved it (float32, another order of additions: ~1e-6; a loss over a part of
# the tokens, or none, is off by more than 1e-2)
TRAINED = 1e-4

Loss = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, int], torch.Tensor]


def _split(model, x, y, rows):
    h, t = model.hidden(x).flatten(0, 1), y.flatten()
    return list(zip(h.split(rows), t.split(rows), strict=True)), t


def _sum(model, h, t):
    return F.cross_entropy(model.lm_head(h), t, reduction="sum", ignore_index=sequences.IGNORE_INDEX)


def whole_loss(model, x, y, rows):
    logits = model(x).flatten(0, 1)
    return F.cross_entropy(logits, y.flatten(), ignore_index=sequences.IGNORE_INDEX)


def _chunks_not_weighted(model, x, y, rows):
    """The mean of the chunks' mean losses: a chunk with few real tokens weighs as a full one."""
    chunks, _ = _split(model, x, y, rows)
    means = [F.cross_entropy(model.lm_head(h), t, ignore_index=sequences.IGNORE_INDEX) for h, t in chunks]
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
class Memory:
    mix: torch.Tensor  # the mixing layer after one SGD step on the whole loss
    travelled: float
    logits_bytes: int
    tokens: int


def _trajectory(params: dict, loss: Loss, rows: int) -> list[torch.Tensor]:
    model, batches = sequences.chunked(params)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    after = []
    for x, y in batches:
        loss(model, x, y, rows).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(weights))
    return after


@lru_cache(maxsize=32)
def _cached(key: str, name: str, rows: int) -> list[torch.Tensor]:
    params = json.loads(key)
    return _trajectory(params, whole_loss if name == "reference" else MATHS_MISTAKES[name], rows)


def trajectory(params: dict, name: str = "reference", rows: int = 0) -> list[torch.Tensor]:
    """The parameters after each batch under the whole loss (``reference``) or a known wrong
    one, chunked by ``rows`` (the exercise's ``chunk_size`` where 0)."""
    rows = rows or int(params["chunk_size"])
    with SEEDING:
        return _cached(json.dumps(params, sort_keys=True), name, rows)


@lru_cache(maxsize=4)
def _memory(key: str) -> Memory | None:
    params = json.loads(key)
    wide = sequences.chunked_memory(params)
    if wide is None:
        return None
    model, [(x, y)] = wide
    before = tensors.flat(sequences.watched(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
    rows = int(params["memory_chunk"])
    chunks, t = _split(model, x, y, rows)  # in chunks here too: the worker holds no whole logits
    total = sum(checkpoint(_sum, model, h, c, use_reentrant=False) for h, c in chunks)
    (total / (t != sequences.IGNORE_INDEX).sum()).backward()
    optimizer.step()
    after = tensors.flat(sequences.watched(model))
    return Memory(after, tensors.norm(after - before), sequences.memory_logits_bytes(params), t.numel())


def memory(params: dict) -> Memory | None:
    with SEEDING:
        return _memory(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    trajectory(params)
    for name in MATHS_MISTAKES:  # judging then only recomputes a chunk size of the learner's own
        trajectory(params, name)
    memory(params)


def _size(params: dict) -> int:
    return len(trajectory(params)[0])


def _final(seen: dict, size: int) -> list:
    """The parameters once the loop returned: read at the end, or as the memory run began."""
    if seen["counts"].get("memory-start"):
        return snapshots(seen, "memory-start")[0][:size]
    return seen["final_params"][:size]


def _after(seen: dict, size: int) -> list[torch.Tensor]:
    """The parameters after each batch, as the supervisor read them: before the next one, and
    once the loop returned."""
    before = [b[:size] for b in snapshots(seen, "batch")]
    return [tensors.vector(a).nan_to_num() for a in [*before[1:], _final(seen, size)]] if before else []


def _errors(after: list[torch.Tensor], ref: list[torch.Tensor]) -> list[float]:
    return [tensors.norm(a - r) / tensors.norm(r) for a, r in zip(after, ref, strict=True)]


def _well_formed(data: dict) -> None:
    """What the child reported has the harness's shape, or the run was tampered with."""
    calls = reported(data, "calls")
    ok = isinstance(calls, list)
    for call in calls if isinstance(calls, list) else []:
        ok = ok and isinstance(call, list) and len(call) == 3 and type(call[2]) is bool
        ok = ok and all(type(v) is int for v in call[:2])
    if not ok:
        raise Interfered("shape", detail="the reported lm_head calls do not have the harness's shape")


def _trajectory_check(params: dict, after: list[torch.Tensor], tol: float) -> Check:
    ref = trajectory(params)
    if len(after) != len(ref):
        counts = {"batches": len(after), "expected": len(ref)}
        return Check("chunked-trajectory", False, "check.chunked-trajectory.batches", counts)
    errors = _errors(after, ref)
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values = {"batch": bad + 1, "error": Sci(errors[bad])}
        return Check("chunked-trajectory", False, "check.chunked-trajectory.failed", values)
    return Check("chunked-trajectory", True, "check.chunked-trajectory.passed", {"error": Sci(max(errors))})


def kernel_check(params: dict, data: dict, size: int) -> Check | None:
    """The memory run as the supervisor saw it (None where the exercise has none, or on CUDA,
    where no child is watched): the mixing layer where one SGD step on the whole loss puts it,
    and the rise of the process's memory, as the kernel counted it, under ``KERNEL_FACTOR`` ×
    the whole logits' bytes. What the loop's process reported names the mistake; this is what a
    pass rests on."""
    wide = memory(params)
    seen = observed(data)
    if wide is None or not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    total = size + wide.mix.numel()
    error = kernel_memory.trained(seen, "memory-end", total, size, wide.mix, wide.travelled)
    limit = int(KERNEL_FACTOR * wide.logits_bytes)
    values = {
        "rise": rise,
        "limit": limit,
        "logits": wide.logits_bytes,
        "tokens": wide.tokens,
        "vocab": int(params["memory_vocab"]),
        "since": since,
        "held": limit + HELD,
    }
    if not error <= TRAINED:
        return Check("logits_kernel", False, "check.logits_kernel.untrained", values)
    if rise > limit:
        return Check("logits_kernel", False, "check.logits_kernel.failed", values)
    if since > limit + HELD:
        return Check("logits_kernel", False, "check.logits_kernel.held", values)
    return Check("logits_kernel", True, "check.logits_kernel.passed", values)


def _chunk_rows(params: dict, calls: list) -> list[int]:
    """The chunk sizes to recompute the wrong losses with: the exercise's, and the rows of the
    first call of ``lm_head`` in the first batch's forward, as the child reported it (a hint:
    a wrong loss is named only where the parameters follow it)."""
    rows = [int(params["chunk_size"])]
    first = next((r for run, r, backward in calls if run == 0 and not backward), None)
    if (
        first is not None
        and 0 < first < int(params["batch_size"]) * int(params["seq_len"])
        and first not in rows
    ):
        rows.append(first)
    return rows


def _named_by_trajectory(params: dict, after: list[torch.Tensor], calls: list) -> Diagnosis | None:
    """The known wrong loss whose recomputed trajectory the observed parameters follow."""
    best: tuple[float, str, int] | None = None
    for name in MATHS_MISTAKES:
        for rows in _chunk_rows(params, calls):
            ref = trajectory(params, name, rows)
            if len(ref) != len(after):
                continue
            worst = max(_errors(after, ref))
            if math.isfinite(worst) and worst <= NAMED and (best is None or worst < best[0]):
                best = (worst, name, rows)
    if best is None:
        return None
    _worst, name, rows = best
    ref, mine = trajectory(params), trajectory(params, name, rows)
    ratio = tensors.norm(mine[0] - _start(params)) / max(tensors.norm(ref[0] - _start(params)), 1e-300)
    return Diagnosis(name, {"rows": rows, "ratio": round(ratio, 2)})


@lru_cache(maxsize=8)
def _start_cached(key: str) -> torch.Tensor:
    model, _ = sequences.chunked(json.loads(key))
    return tensors.flat(list(model.parameters()))


def _start(params: dict) -> torch.Tensor:
    with SEEDING:
        return _start_cached(json.dumps(params, sort_keys=True))


def _named_by_memory(params: dict, calls: list) -> Diagnosis | None:
    """The memory mistake the reported calls of ``lm_head`` in the memory run show (its rise
    already failed the kernel's check)."""
    tokens = int(params["memory_rows"]) * int(params["memory_seq_len"])
    forward = [r for run, r, backward in calls if run == 1 and not backward]
    again = [r for run, r, backward in calls if run == 1 and backward]
    if forward and max(forward) >= tokens:
        return Diagnosis("whole-logits-built", {"rows": max(forward), "tokens": tokens})
    if forward and not again:
        return Diagnosis("graph-kept-across-chunks", {"chunks": len(forward), "rows": max(forward)})
    return None


def _oversized(params: dict, calls: list) -> Check | None:
    """A failing line where the program's own report says it called ``lm_head`` on more rows at
    once than the run's chunk size (the maths run's ``chunk_size``, the memory run's
    ``memory_chunk``): on the maths run's tiny vocabulary no memory figure can tell whole logits
    from chunks, and a chunk half again as large stays under the memory run's line. What the
    child reports may fail a loop, never pass one: None where it reports nothing too large."""
    runs = (
        (int(params["chunk_size"]), int(params["batch_size"]) * int(params["seq_len"])),
        (
            int(params.get("memory_chunk") or 0),
            int(params.get("memory_rows") or 0) * int(params.get("memory_seq_len") or 0),
        ),
    )
    for run, (limit, tokens) in enumerate(runs):
        rows = max((r for n, r, backward in calls if n == run and not backward), default=0)
        if limit and rows > limit:
            values = {"rows": rows, "chunk_size": limit, "tokens": tokens}
            return Check("chunked-size", False, "check.chunked-size.failed", values)
    return None


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    _well_formed(data)
    size = _size(params)
    agree(reported(data, "final_params"), _final(seen, size), "parameters")
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    after = _after(seen, size)
    checks = [_trajectory_check(params, after, tol)]
    kernel = kernel_check(params, data, size)
    if kernel is not None:
        checks.append(kernel)
    calls = reported(data, "calls")  # lm_head's calls: they only name a mistake, or fail one
    oversized = _oversized(params, calls)
    if oversized is not None:
        checks.append(oversized)
    metrics: dict = {"batches": len(after)}
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
        diagnosis = (
            _named_by_trajectory(params, after, calls) if len(after) == len(trajectory(params)) else None
        )
    elif kernel is not None and not kernel.passed and not kernel.message.endswith("untrained"):
        diagnosis = _named_by_memory(params, calls)
    elif oversized is not None and oversized.values["rows"] >= oversized.values["tokens"]:
        diagnosis = Diagnosis(
            "whole-logits-built", {"rows": oversized.values["rows"], "tokens": oversized.values["tokens"]}
        )
    return Evaluation(checks, diagnosis, metrics)


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
