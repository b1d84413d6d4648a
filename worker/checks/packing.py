"""Checks of the "packing" kind (lesson 6, pack-the-batch).

The reference trains each document alone: its own row, positions from 0, plain causal attention,
its shifted labels; the batch's loss is the sum of every document's token losses over all their
labels, one plain SGD step per batch, on the same seeded float64 ``PackedLM``, here on the CPU. A
packed loop passes when the parameters after every batch, read by the sandbox's supervisor, are
that reference's: which holds only where no token attended another document, positions restarted
with each one, and no padding or boundary label counted.

Each known mistake is recomputed here on the rows the exercise describes (documents in order, a
new row when the next one does not fit whole), and the one whose trajectory the learner's
parameters follow is named.
"""

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from contracts.messages import Sci
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
from worker.harness import packing as harness
from worker.harness import sequences
from worker.harness.protocol import reported

IGNORE = sequences.IGNORE_INDEX
PAD = 0  # the token a row's end is padded with (its labels are IGNORE)
# relative parameter error: packed rows and lone documents add the same terms in another order
# (float64: ~1e-16); a document that saw another, or a row weighed apart, is off by ≥ 1e-3
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}
NAMED = 1e-6  # a known mistake is named when the parameters follow its recomputed trajectory this close
# The memory run, as the kernel counts the process: its line, a share of the logits a row per
# document takes (32 rows of 2 MiB; packed, 3), and what a right loop may hold from the load of
# the learner's file (the maths run's leftovers, its module). Measured: see MEASURED below
MEMORY_FACTOR = 1.0
HELD = 8 << 20
# the memory run's read layers against one SGD step on each document alone, relative to how far
# that step moved them (float64: ~1e-13 for a right loop, padded rows included)
MEMORY_TRAINED = 1e-6


@dataclass(frozen=True)
class Rows:
    """A batch packed as the exercise says: ``(rows, length)`` each."""

    tokens: torch.Tensor
    labels: torch.Tensor  # IGNORE at each document's last token and on padding
    boundary: torch.Tensor  # the labels with each boundary's label kept (the next document's first token)
    positions: torch.Tensor  # restarting at 0 with each document
    docs: torch.Tensor  # which document of its row each token is in; -1 on padding


def pack(documents: list[torch.Tensor], length: int) -> Rows:
    """``documents`` in order, each after the previous one in the current row while it fits whole,
    else in a new row; each row's end padded."""
    rows: list[list[torch.Tensor]] = [[]]
    for doc in documents:
        if sum(len(d) for d in rows[-1]) + len(doc) > length:
            rows.append([])
        rows[-1].append(doc)
    shape = (len(rows), length)
    tokens = torch.full(shape, PAD, dtype=torch.long)
    labels = torch.full(shape, IGNORE, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    docs = torch.full(shape, -1, dtype=torch.long)
    boundary = labels.clone()
    for r, row in enumerate(rows):
        start = 0
        for i, doc in enumerate(row):
            n, end = len(doc), start + len(doc)
            tokens[r, start:end] = doc
            labels[r, start : end - 1] = doc[1:]
            boundary[r, start : end - 1] = doc[1:]
            if i + 1 < len(row):
                boundary[r, end - 1] = row[i + 1][0]
            positions[r, start:end] = torch.arange(n)
            docs[r, start:end] = i
            start = end
    return Rows(tokens, labels, boundary, positions, docs)


def _causal(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


def alone_loss(model: sequences.PackedLM, documents: list[torch.Tensor], length: int) -> torch.Tensor:
    """The reference: each document in a row of its own, its token losses summed, divided once
    by every document's labels."""
    total = torch.zeros((), dtype=torch.float64)
    for doc in documents:
        n = len(doc)
        logits = model(doc[None], torch.arange(n)[None], _causal(n)[None])[0]
        total = total + F.cross_entropy(logits[:-1], doc[1:], reduction="sum")
    return total / sum(len(d) - 1 for d in documents)


def packed_loss(
    model: sequences.PackedLM,
    documents: list[torch.Tensor],
    length: int,
    *,
    attention: str = "documents",
    positions: str = "restart",
    labels: str = "masked",
    mean: str = "batch",
) -> torch.Tensor:
    """The loss of the packed rows, right by default; each keyword one way of getting it wrong."""
    rows = pack(documents, length)
    causal = _causal(length)[None]
    same = rows.docs[:, :, None] == rows.docs[:, None, :]
    mask = causal & same if attention == "documents" else causal.expand(len(rows.tokens), -1, -1)
    where = rows.positions if positions == "restart" else torch.arange(length).expand_as(rows.tokens)
    target = rows.labels if labels == "masked" else rows.boundary
    logits = model(rows.tokens, where, mask)
    losses = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE, reduction="none")
    losses = losses.view_as(target)
    real = (target != IGNORE).sum(dim=1)
    if mean == "rows":
        return (losses.sum(dim=1) / real.clamp(min=1)).mean()
    return losses.sum() / real.sum()


MISTAKES = {
    "cross-document-attention": {"attention": "causal"},
    "positions-not-restarted": {"positions": "run"},
    "boundary-label-kept": {"labels": "boundary"},
    "loss-averaged-per-row": {"mean": "rows"},
}


def _trajectory(params: dict, name: str) -> list[torch.Tensor]:
    model, batches = sequences.packing(params)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    length = int(params["row_len"])
    after = []
    for documents in batches:
        if name == "reference":
            loss = alone_loss(model, documents, length)
        else:
            loss = packed_loss(model, documents, length, **MISTAKES[name])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(weights))
    return after


@lru_cache(maxsize=32)
def _cached(key: str, name: str) -> list[torch.Tensor]:
    return _trajectory(json.loads(key), name)


def trajectory(params: dict, name: str = "reference") -> list[torch.Tensor]:
    """The parameters after each batch: each document alone (``reference``), or a known mistake."""
    with SEEDING:
        return _cached(json.dumps(params, sort_keys=True), name)


@lru_cache(maxsize=8)
def _packed_rows_cached(key: str) -> tuple[int, ...]:
    params = json.loads(key)
    _model, batches = sequences.packing(params)
    return tuple(len(pack(documents, int(params["row_len"])).tokens) for documents in batches)


def packed_rows(params: dict) -> tuple[int, ...]:
    """How many rows each batch fills packed as the exercise says."""
    with SEEDING:
        return _packed_rows_cached(json.dumps(params, sort_keys=True))


@lru_cache(maxsize=8)
def _layout_cached(key: str) -> dict[str, int]:
    """What the first batch's rows hold, for the explanations: rows, documents that share a row
    with an earlier one, and the boundaries inside rows."""
    params = json.loads(key)
    _model, batches = sequences.packing(params)
    rows = pack(batches[0], int(params["row_len"]))
    shared = int(rows.docs.max(dim=1).values.clamp(min=0).sum())  # ids 0…k-1: k-1 after the first
    return {"rows": len(rows.tokens), "docs": len(batches[0]), "shared": shared}


def _layout(params: dict) -> dict[str, int]:
    with SEEDING:
        return _layout_cached(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    packed_rows(params)
    if harness.memory_params(params) is not None:
        memory_step(params)
    trajectory(params)
    for name in MISTAKES:
        trajectory(params, name)


def _size(params: dict) -> int:
    return len(trajectory(params)[0])


def _errors(after: list[torch.Tensor], ref: list[torch.Tensor]) -> list[float]:
    return [tensors.norm(a - r) / tensors.norm(r) for a, r in zip(after, ref, strict=True)]


def _named(params: dict, after: list[torch.Tensor]) -> Diagnosis | None:
    """The known mistake whose recomputed trajectory the observed parameters follow."""
    found = []
    for name in MISTAKES:
        worst = max(_errors(after, trajectory(params, name)))
        if worst <= NAMED:
            found.append((worst, name))
    if not found:
        return None
    return Diagnosis(min(found)[1], _layout(params))


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    final = reported(data, "final_params")
    if not isinstance(final, list):
        raise Interfered("shape", detail="the report has no parameters")
    size = _size(params)
    agree(final, seen["final_params"][:size], "parameters")
    before = [b[:size] for b in snapshots(seen, "batch")]
    ends = [*before[1:], seen["final_params"][:size]] if before else []
    after = [tensors.vector(a).nan_to_num() for a in ends]
    ref = trajectory(params)
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    diagnosis = None
    values: dict[str, Any]
    if len(after) != len(ref):
        values = {"batches": len(after), "expected": len(ref)}
        check = Check("packed-trajectory", False, "check.packed-trajectory.batches", values)
    else:
        errors = _errors(after, ref)
        bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
        if bad is None:
            values = {"error": Sci(max(errors))}
            check = Check("packed-trajectory", True, "check.packed-trajectory.passed", values)
        else:
            values = {"batch": bad + 1, "error": Sci(errors[bad])}
            check = Check("packed-trajectory", False, "check.packed-trajectory.failed", values)
            diagnosis = _named(params, after)
    rows = _rows_check(params, seen, size)
    if (
        check.passed
        and not rows.passed
        and rows.message in ("check.packed-rows.failed", "check.packed-rows.kernel")
    ):
        diagnosis = Diagnosis("one-document-per-row", _one_per_row(params, seen, rows))
    metrics: dict[str, Any] = {"batches": len(after), "documents_per_batch": int(params["docs_per_batch"])}
    metrics |= _layout(params)
    length = int(params["row_len"])
    metrics["model_rows"] = [-(-p // length) for p in _positions(seen)][:64]
    return Evaluation([check, rows], diagnosis, metrics)


def _positions(seen: dict) -> list[int]:
    """The token positions of each call of the model (the number the harness's hook sent)."""
    return [p for label, p, _ms, _shot in seen["events"] if label == "forward"]


def _rows_check(params: dict, seen: dict, size: int) -> Check:
    """Packed rows, not a row per document. The harness's hook sends each call's token
    positions (a report: it fails a loop, never passes one): one call per batch, on at most as
    many positions as the batch's packed rows hold. A pass rests on the memory run
    (``params["memory_vocab"]``): the layers the supervisor read at its end are where one SGD
    step on each document alone puts them, and the process's memory, as the kernel counted it,
    rose by less than ``MEMORY_FACTOR`` of the logits a row per document would take (and
    ``HELD`` more from the learner's file's load). Without one (or on CUDA, where no child is
    watched) the line says it rests on the program's word."""
    expected = packed_rows(params)
    length = int(params["row_len"])
    calls = _positions(seen)
    count = seen["counts"].get("forward", 0)
    values: dict[str, Any] = {"calls": count, "batches": len(expected), "packed": max(expected)}
    if count != len(expected) or len(calls) != count:
        return Check("packed-rows", False, "check.packed-rows.calls", values)
    over = next(
        (i for i, (p, n) in enumerate(zip(calls, expected, strict=True)) if not 0 < p <= n * length), None
    )
    if over is not None:
        positions = calls[over]
        values |= {"batch": over + 1, "rows": -(-positions // length), "packed": expected[over]}
        values |= {"positions": positions, "row_len": length}
        return Check("packed-rows", False, "check.packed-rows.failed", values)
    mem = harness.memory_params(params)
    if mem is None or not kernel_memory.watched(seen):
        return Check("packed-rows", True, "check.packed-rows.reported", values)
    packed, docs = memory_rows(params)
    row = mem["row_len"] * mem["vocab"] * 8  # one row's float64 logits
    limit = int(MEMORY_FACTOR * docs * row)
    values = {"docs": docs, "packed": packed, "row": row, "limit": limit, "held": limit + HELD}
    values |= {"rise": kernel_memory.rise(seen, "memory-start", "memory-end")}
    values |= {"since": kernel_memory.since_watch(seen, "memory-end")}
    ref = memory_step(params)
    ends = snapshots(seen, "memory-end")
    fetched = seen["counts"].get("memory-batch", 0)
    mine = tensors.vector(ends[0][size : size + ref.numel()]).nan_to_num() if ends else None
    start = memory_start(params)
    off = (
        math.inf
        if mine is None or mine.shape != ref.shape
        else tensors.norm(mine - ref) / tensors.norm(ref - start)
    )
    if fetched < 1 or not off <= MEMORY_TRAINED:
        return Check("packed-rows", False, "check.packed-rows.untrained", values)
    if values["rise"] > limit:
        return Check("packed-rows", False, "check.packed-rows.kernel", values)
    if values["since"] > limit + HELD:
        return Check("packed-rows", False, "check.packed-rows.held", values)
    return Check("packed-rows", True, "check.packed-rows.passed", values)


def _one_per_row(params: dict, seen: dict, rows: Check) -> dict[str, Any]:
    """The explanation's figures: the first batch's rows where the hook's count said it, else
    the memory run's."""
    if rows.message == "check.packed-rows.failed":
        return dict(rows.values)
    packed, docs = memory_rows(params)
    mem = harness.memory_params(params) or {}
    return {"batch": 1, "rows": docs, "packed": packed, "positions": docs * mem.get("row_len", 0)}


@lru_cache(maxsize=8)
def _memory_cached(key: str) -> tuple[tuple[int, int], torch.Tensor, torch.Tensor]:
    """The memory run's packed rows and documents, its read layers before and after one SGD step
    on each document alone (float64, the CPU)."""
    mem = json.loads(key)
    model, batches = sequences.packing(mem)
    layers = harness.read_layers(model)
    before = tensors.flat(layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(mem["lr"]))
    alone_loss(model, batches[0], int(mem["row_len"])).backward()
    optimizer.step()
    return (len(pack(batches[0], int(mem["row_len"])).tokens), len(batches[0])), before, tensors.flat(layers)


def _memory(params: dict) -> tuple[tuple[int, int], torch.Tensor, torch.Tensor]:
    mem = harness.memory_params(params)
    with SEEDING:
        return _memory_cached(json.dumps(mem, sort_keys=True))


def memory_rows(params: dict) -> tuple[int, int]:
    """The memory run's batch: its rows packed as the exercise says, and its documents."""
    return _memory(params)[0]


def memory_start(params: dict) -> torch.Tensor:
    return _memory(params)[1]


def memory_step(params: dict) -> torch.Tensor:
    """The memory run's read layers after its one step, each document trained alone."""
    return _memory(params)[2]


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
