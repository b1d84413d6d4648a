"""Checks of the "packing" kind (lesson 6, pack-the-batch).

The reference trains each document alone: its own row, positions from 0, plain causal attention,
its shifted labels; the batch's loss is the sum of every document's token losses over all their
labels, one plain SGD step per batch, on the same seeded float64 ``PackedLM``, here on the CPU. A
packed loop passes when the parameters after every batch, read by the sandbox's supervisor, are
that reference's: which holds only where no token attended another document, positions restarted
with each one, and no padding or boundary label counted.

The learner's loop runs once (red team 5: a program that told a small maths run from a second,
wide memory run gave each document a padded row of its own where memory was not counted). The
parameters after every optimizer step, as the supervisor read them (``hookstep.Sampled``: small
tensors whole, large ones at places it drew after the fork), must be the reference's; then, where
the exercise counts memory (``params["kernel_memory"]``), the process's memory over the run, as the
kernel counted it, must rise by less than the logits of a row per document. The calls of the
model's token embedding the child's hook reported (positions per call) only fail a loop: a loop
that runs each document alone, unpadded, in a call of its own computes what packing computes in no
more memory, and only that report tells it apart.

Each known mistake is recomputed here on the rows the exercise describes (documents in order, a
new row when the next one does not fit whole), and the one whose trajectory the learner's
parameters follow is named.
"""

# ruff: noqa: F405  (the kit's names, from worker/checks/kit.py)

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from contracts.messages import Sci
from worker.checks.chunked import Read, read_sampled
from worker.checks.kit import *  # noqa: F403  (worker/checks/kit.py)
from worker.harness import sequences

IGNORE = sequences.IGNORE_INDEX
PAD = 0  # the token a row's end is padded with (its labels are IGNORE)
# parameter error at the places read, relative to how far the reference moved them there: packed
# rows and lone documents add the same terms in another order (float64: ~1e-13); a document that
# saw another, or a row weighed apart, is off by ≥ 1e-3
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}
NAMED = 1e-6  # a known mistake is named when the parameters follow its recomputed trajectory this close
# The run's memory, as the kernel counts the process: its line, a share of the logits a row per
# document takes (32 rows of 2 MiB a batch; packed, 3), and what a right loop may hold from the
# load of the learner's file (its module, torch's lazily made state). Measured on the CPU under
# `treino check`: see docs/security.md's row
MEMORY_FACTOR = 1.0
HELD = 8 << 20


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
    dtype: str = "float64",
) -> torch.Tensor:
    """The loss of the packed rows, right by default; each keyword one way of getting it wrong."""
    rows = pack(documents, length)
    causal = _causal(length)[None]
    same = rows.docs[:, :, None] == rows.docs[:, None, :]
    mask = causal & same if attention == "documents" else causal.expand(len(rows.tokens), -1, -1)
    where = rows.positions if positions == "restart" else torch.arange(length).expand_as(rows.tokens)
    target = rows.labels if labels == "masked" else rows.boundary
    logits = model(rows.tokens, where, mask).to(getattr(torch, dtype))
    if dtype != "float64":  # as a learner's loop writes it: the mean over real labels, in that dtype
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE)
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
# red team F1: the loss computed in a precision lower than the model's float64 (the logits cast,
# a float32 cross-entropy) misses the reference by rounding, not by a mask: recomputed so that the
# text names the precision where the parameters follow one (no mistake id: the text only)
PRECISIONS = ("float32", "bfloat16", "float16")
# below this the gap is rounding's size, not a wrong mask, position or label: the named mistakes
# move the parameters by 0.18-0.95 of the step here; the loss in float32 by 2.4e-8
ROUNDING = 1e-5


def _trajectory(params: dict, name: str) -> list[torch.Tensor]:
    model, batches = sequences.packing(params)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    length = int(params["row_len"])
    after = [tensors.flat(weights)]
    for documents in batches:
        if name == "reference":
            loss = alone_loss(model, documents, length)
        elif name in PRECISIONS:
            loss = packed_loss(model, documents, length, dtype=name)
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
    """The parameters at the start and after each batch: each document alone (``reference``), or
    a known mistake."""
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
    trajectory(params)
    for name in (*MISTAKES, *PRECISIONS):
        trajectory(params, name)


@lru_cache(maxsize=8)
def _sizes_cached(key: str) -> tuple[int, ...]:
    params = json.loads(key)
    model, _batches = sequences.packing(params)
    return tuple(p.numel() for p in model.parameters())


def _sizes(params: dict) -> list[int]:
    """Each parameter's values, in the order the supervisor reads them."""
    with SEEDING:
        return list(_sizes_cached(json.dumps(params, sort_keys=True)))


def _errors(after: list[Read], ref: list[torch.Tensor]) -> list[float]:
    """Each step's distance from ``ref`` at the places read, relative to how far ``ref`` had
    moved them from the start."""
    start = ref[0]
    errors = []
    for (places, values), r in zip(after, ref[1:], strict=True):
        travelled = max(tensors.norm(r[places] - start[places]), 1e-300)
        errors.append(tensors.norm(values.nan_to_num() - r[places]) / travelled)
    return errors


def _named(params: dict, after: list[Read]) -> Diagnosis | None:
    """The known mistake whose recomputed trajectory the observed parameters follow."""
    found = []
    for name in MISTAKES:
        worst = max(_errors(after, trajectory(params, name)))
        if worst <= NAMED:
            found.append((worst, name))
    if not found:
        return None
    return Diagnosis(min(found)[1], _layout(params))


def _after(seen: dict, params: dict, expected: int) -> tuple[list[Read], int]:
    """The parameters after each optimizer step as the supervisor read them, the first
    ``expected`` of them, and how many steps the loop took. Read at the step (red team 5): at
    the next batch's fetch, a right loop that packed every batch first was read before it
    stepped."""
    taken = int(seen["counts"].get("step", 0))
    shots = snapshots(seen, "step")[:expected]
    if len(shots) < min(taken, expected):
        raise Interfered("shape", detail="a step's parameters were not read")
    return [read_sampled(shot, _sizes(params)) for shot in shots], taken


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    ref = trajectory(params)
    expected = len(ref) - 1
    after, taken = _after(seen, params, expected)
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    diagnosis = None
    values: dict[str, Any]
    if taken != expected or len(after) != taken:
        values = {"batches": taken, "expected": expected}
        check = Check("packed-trajectory", False, "check.packed-trajectory.batches", values)
    else:
        errors = _errors(after, ref)
        bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
        if bad is None:
            values = {"error": Sci(max(errors))}
            check = Check("packed-trajectory", True, "check.packed-trajectory.passed", values)
        else:
            values = {"batch": bad + 1, "error": Sci(errors[bad])}
            diagnosis = _named(params, after)
            check = Check("packed-trajectory", False, _missed(params, after, errors, diagnosis), values)
            if check.message != "check.packed-trajectory.failed":
                values["dtype"] = _precision(params, after, errors) or "float32"
    rows = _rows_check(params, seen, check.passed)
    more = rows.message == "check.packed-rows.failed" and rows.values["rows"] > rows.values["packed"]
    if check.passed and (more or rows.message == "check.packed-rows.kernel"):
        diagnosis = Diagnosis("one-document-per-row", _one_per_row(params, seen, rows))
    metrics: dict[str, Any] = {"batches": taken, "documents_per_batch": int(params["docs_per_batch"])}
    metrics |= _layout(params)
    length = int(params["row_len"])
    metrics["model_rows"] = [-(-p // length) for p in _positions(seen)][:64]
    return Evaluation([check, rows], diagnosis, metrics)


def _precision(params: dict, after: list[Read], errors: list[float]) -> str | None:
    """The lower precision whose recomputed loss the observed parameters follow (within
    ``NAMED``, and ten times closer than to the reference: float32's own gap is 2.4e-8, so
    near the reference every trajectory is within ``NAMED`` of it), or None."""
    found = [(max(_errors(after, trajectory(params, name))), name) for name in PRECISIONS]
    worst, name = min(found)
    return name if worst <= min(NAMED, 0.1 * max(errors)) else None


def _missed(params: dict, after: list[Read], errors: list[float], diagnosis: Diagnosis | None) -> str:
    """The text of a trajectory missed (red team F1): a masking mistake's, or where the gap is
    rounding's (every step within ``ROUNDING``, or the parameters follow the loss recomputed in a
    lower precision) and no mistake is named, the precision's."""
    if diagnosis is not None:
        return "check.packed-trajectory.failed"
    if _precision(params, after, errors) is not None:
        return "check.packed-trajectory.precision"
    if max(errors) <= ROUNDING:
        return "check.packed-trajectory.rounding"
    return "check.packed-trajectory.failed"


def _positions(seen: dict) -> list[int]:
    """The token positions of each call of the model (the number the harness's hook sent)."""
    return [p for label, p, _ms, _shot in seen["events"] if label == "forward"]


def _rows_check(params: dict, seen: dict, trained: bool) -> Check:
    """Packed rows, not a row per document. The harness's hook sends each call's token
    positions (a report: it fails a loop, never passes one): one call per batch, on whole rows
    of ``row_len``, at most as many as the batch's documents fill packed.
    A pass rests on the kernel's count of the run (``params["kernel_memory"]``): once the
    parameters the supervisor read are the reference's (``trained``), the process's memory rose
    by less than ``MEMORY_FACTOR`` of the logits a row per document takes in a batch (and
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
        (
            i
            for i, (p, n) in enumerate(zip(calls, expected, strict=True))
            if not (0 < p <= n * length and p % length == 0)
        ),
        None,
    )
    if over is not None:
        positions = calls[over]
        values |= {"batch": over + 1, "rows": -(-positions // length), "packed": expected[over]}
        values |= {"positions": positions, "row_len": length}
        return Check("packed-rows", False, "check.packed-rows.failed", values)
    if not params.get("kernel_memory") or not kernel_memory.watched(seen):
        return Check("packed-rows", True, "check.packed-rows.reported", values)
    docs = int(params["docs_per_batch"])
    row = length * int(params["vocab"]) * 8  # one row's float64 logits
    limit = int(MEMORY_FACTOR * docs * row)
    values = {"docs": docs, "packed": max(expected), "row": row, "limit": limit, "held": limit + HELD}
    values |= {"rise": kernel_memory.rise(seen, "memory-start", "memory-end")}
    values |= {"since": kernel_memory.since_watch(seen, "memory-end")}
    if not trained:
        return Check("packed-rows", False, "check.packed-rows.untrained", values)
    if values["rise"] > limit:
        return Check("packed-rows", False, "check.packed-rows.kernel", values)
    if values["since"] > limit + HELD:
        return Check("packed-rows", False, "check.packed-rows.held", values)
    return Check("packed-rows", True, "check.packed-rows.passed", values)


def _one_per_row(params: dict, seen: dict, rows: Check) -> dict[str, Any]:
    """The explanation's figures: the first batch's rows where the hook's count said it, else
    a row per document of the first batch."""
    if rows.message == "check.packed-rows.failed":
        return dict(rows.values)
    docs, packed = int(params["docs_per_batch"]), packed_rows(params)[0]
    return {"batch": 1, "rows": docs, "packed": packed, "positions": docs * int(params["row_len"])}


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
