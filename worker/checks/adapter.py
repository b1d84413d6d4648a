"""Checks of the "adapter" kind (lesson 5).

The model is the seeded float64 MLP of ``harness.the_run`` (``Linear(1024, 4096)``, ``Tanh``,
``Linear(4096, 1024)``, no biases), frozen; the learner trains two matrices beside its last layer,
which then computes ``layer(h) + h @ (A @ B)`` (A ``hidden × rank``, B ``rank × classes``, or the
transposed weights of two bias-free ``nn.Linear``). The learner's loop runs once (issue 41: a
program that told a small maths run from a wide memory run froze the base only where memory was
counted, or froze only the one wide layer). Passing means: the model's weights never move (read by
the sandbox's supervisor at places it drew) and never get a gradient (the kernel's count of the
process over that one call: each weight's gradient is 32 MiB; the gradients the child reports only
name the mistake); the optimizer keeps state for the adapter only; the tensors the optimizers updated
besides the model's, as the supervisor read them in the pool the harness put them in
(``worker/harness/adapter.py``), are two that make an adapter of the rank the exercise asks for
(``params["rank"]``): an adapter of another rank trained beside a decoy of the asked one has four;
it adds nothing at step 0; its values after every step, read by the supervisor at that step (at
places it drew), equal a trusted float64 replay of Adam on the CPU, from the values it was placed
with (read whole); and it moved. The last one is not implied by the replay: an adapter whose
``A`` and ``B`` both start at zero gets zero gradients, and Adam from there stays put too, so the
replay agrees with an adapter that never trained (and so would one of rank 0, two empty
matrices).

The child's reports fail a loop, never pass one: every output it handed ``loss_fn``, and the
model's output on the run's inputs once ``train`` returned, are recomputed here from the frozen
model and the adapter the supervisor read, stepped by that replay (``adapter-output``): a model
changed by anything else (another adapter, trained by hand or by an optimizer of the program's
own) fails. Where the
program says nothing (no output recorded, its model not adapted in place), the line passes on
what the supervisor read alone.
"""

# ruff: noqa: F405  (the kit's names, from worker/checks/kit.py)

import itertools
import json
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch

from contracts.messages import Phrase, Sci
from contracts.verdict import ChartRecord, chart
from worker.checks.kit import *  # noqa: F403  (worker/checks/kit.py)
from worker.harness import adapter as harness
from worker.harness.protocol import reported

TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}  # relative, on the adapter's values after each step
# on an output the program reported, relative to the largest output: the same sums in another
# order are ~1e-16 apart in float64; another adapter beside it, ~1e-2
OUTPUT_TOLERANCE = {"cpu": 1e-9, "cuda": 1e-6}
# an output of a coarser dtype (a loss logged in float32 under torch.no_grad() is a right loop's):
# held to that dtype's rounding instead (red team 8 F1)
DTYPE_TOLERANCE = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}
# a float64 output that far at most from base plus adapter is float32's rounding (1e-7 per
# operation), not another adapter's change (red team 8 F1: it blamed "a second adapter")
ROUNDING = 1e-4
# The one run, as the kernel counts the process over the learner's call: a frozen base rises by
# 2.5-5.0 MiB (right loops in seven styles; torch.func's transforms the most: the code they page
# in), one that gets a gradient for any of its weights by that weight's 32 MiB or more (only the
# first weight: 35, both: 68; measured). The line, a share of the smallest weight's gradient:
# 16 MiB, as far from the one as from the other
FROZEN_FACTOR = 0.5
# What a right loop may hold from before its call, since the supervisor began to watch (as the
# learner's file was loaded; the harness pages torch's code in before that): the learner's module
# (measured: 0.4-0.5 MiB). A loop that holds memory into the call and frees it there (a ballast)
# lowers the rise by as much, never this
HELD = 4 << 20

# how two matrices make the adapter's path: ``h`` (rows of the last layer's inputs) to its
# update of the output, ``(h @ A) @ B``, not through the ``hidden × classes`` product (32 MiB);
# with ``h`` None, that product itself (its size at step 0)
Delta = Callable[[torch.Tensor | None, list[torch.Tensor]], torch.Tensor]


def _dims(params: dict) -> tuple[int, int]:
    """The last layer's inputs and outputs: the adapter's ``hidden × classes`` update."""
    return int(params["hidden"]), int(params["classes"])


def _delta(shapes: list[list[int]], dims: tuple[int, int]) -> tuple[int, Delta] | None:
    """How two matrices of these shapes make the ``hidden × classes`` update ``h @ delta``, and
    their rank: A @ B, or ``nn.Linear`` weights (``rank × hidden`` then ``classes × rank``) as
    ``A.T @ B.T``; None otherwise."""
    D_IN, D_OUT = dims  # noqa: N806
    if len(shapes) != 2 or any(len(s) != 2 for s in shapes):
        return None
    for order in itertools.permutations(range(2)):
        first, second = (shapes[i] for i in order)
        if first[0] == D_IN and first[1] == second[0] and second[1] == D_OUT:
            return first[
                1
            ], lambda h, ps, o=order: (h @ ps[o[0]]) @ ps[o[1]] if h is not None else ps[o[0]] @ ps[o[1]]
        if first[1] == D_IN and first[0] == second[1] and second[0] == D_OUT:
            return (
                first[0],
                lambda h, ps, o=order: (
                    (h @ ps[o[0]].T) @ ps[o[1]].T if h is not None else ps[o[0]].T @ ps[o[1]].T
                ),
            )
    return None


def _shaped(values: list[Any], shapes: list[list[int]]) -> list[torch.Tensor]:
    flat = tensors.vector(values)
    out, at = [], 0
    for shape in shapes:
        n = shape[0] * shape[1]
        out.append(flat[at : at + n].reshape(shape).clone())
        at += n
    return out


class _Run:
    """The one run as the harness built it (``harness.the_run``), frozen, with what the last
    layer takes on each batch and the frozen output there: built once per exercise (``run``),
    not per grade (its 64 MiB of weights take 0.1-0.2 s to draw). Nothing here is changed
    after it is built."""

    def __init__(self, params: dict) -> None:
        with SEEDING:
            self.model, self.batches, self.loss_fn = harness.the_run(params)
        self.model.requires_grad_(False)
        self.weights = [p.detach().reshape(-1) for p in self.model.parameters()]
        self.sizes = [int(w.numel()) for w in self.weights]
        self.lr = float(params["lr"])
        self.cols = harness.columns(int(params["classes"]))

        with torch.no_grad():  # ``h`` (what the last layer takes) and the frozen output, per batch
            self.hs = [self.model[1](self.model[0](x)) for x, _y in self.batches]
            self.outs = [self.model[2](h) for h in self.hs]

    def hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``h`` and the frozen model's output, all batches in order."""
        return torch.cat(self.hs), torch.cat(self.outs)


@lru_cache(maxsize=2)
def _built(key: str) -> _Run:
    return _Run(json.loads(key))


def run_of(params: dict) -> _Run:
    """The exercise's one run, built once (cached by its parameters)."""
    return _built(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    run_of(params)


def _size(delta: Delta, first: list[torch.Tensor]) -> float:
    """The largest entry of the update ``A @ B`` at step 0 (0 at once where a factor is all zero)."""
    if any(not p.numel() or (bool((p == 0).all())) for p in first) and all(
        bool(p.isfinite().all()) for p in first
    ):
        return 0.0
    return float(delta(None, first).abs().max().nan_to_num(nan=float("inf")))


def _replay(run: _Run, start: list[torch.Tensor], delta: Delta) -> list[torch.Tensor]:
    """The adapter's values after each batch: Adam over it beside the frozen model, in float64."""
    adapter = [t.clone().requires_grad_(True) for t in start]
    optimizer = torch.optim.Adam(adapter, lr=run.lr)
    after = []
    for h, out, (_x, y) in zip(run.hs, run.outs, run.batches, strict=True):
        run.loss_fn(out + delta(h, adapter), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(adapter))
    return after


def _ints(values: object) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def _numbers(values: object) -> bool:
    return isinstance(values, list) and all(v is None or type(v) in (int, float) for v in values)


def _rows_ok(rows: object) -> bool:
    return rows is None or (
        isinstance(rows, list) and all(_numbers(r) and len(r) == harness.COLUMNS for r in rows)
    )


STEP_KEYS = {"batch", "adapter_grads", "base_grads", "grad_bytes", "base_state", "state_bytes"}


def _well_formed(data: dict) -> None:
    """What the child reported has the harness's shape, or the run was tampered with."""
    steps, optimizers = reported(data, "steps"), reported(data, "optimizers")
    layout, outputs, probe = reported(data, "pooled"), reported(data, "outputs"), reported(data, "probe")
    ok = isinstance(steps, list) and _ints(reported(data, "base_grads"))
    ok = ok and isinstance(optimizers, list) and all(_ints(o) for o in optimizers)
    ok = ok and _ints([reported(data, "foreign_steps")])
    for step in steps if ok and isinstance(steps, list) else []:
        ok = ok and isinstance(step, dict) and set(step) >= STEP_KEYS
        ok = ok and _ints([step["batch"], step["grad_bytes"], step["base_state"], step["state_bytes"]])
        ok = ok and _ints(step["base_grads"])
    ok = ok and isinstance(layout, list) and len(layout) <= harness.MAX_POOLED
    at = 0
    for entry in layout if ok else []:
        ok = ok and isinstance(entry, dict) and _ints(entry.get("shape")) and _ints([entry.get("offset")])
        if ok and entry["offset"] >= 0:  # the harness places each tensor after the one before
            ok = entry["offset"] == at and all(n >= 0 for n in entry["shape"])
            at += math.prod(entry["shape"])
            ok = ok and at <= harness.POOL
    ok = ok and isinstance(outputs, list) and len(outputs) <= harness.MAX_OUTPUTS
    for out in outputs if ok else []:
        ok = ok and isinstance(out, dict) and _ints([out.get("steps")]) and _rows_ok(out.get("values"))
        ok = ok and isinstance(out.get("dtype", ""), str) and isinstance(out.get("grad", False), bool)
    full = reported(data, "full_size")
    ok = ok and (full is None or (_ints(full) and len(full) <= 8))
    ok = ok and (probe is None or (isinstance(probe, dict) and _rows_ok(probe.get("values"))))
    if not ok:
        raise Interfered("shape", detail="the reported steps do not have the harness's shape")


def _labels(seen: dict) -> dict[int, str]:
    """Each snapshot's sync label, by its index."""
    return {e[3]: e[0] for e in seen["events"] if e[3] >= 0}


class _Reads:
    """What the supervisor read (``harness._Read``): how far the base's weights moved at the
    places it drew, relative to their size there (the most of any reading); the adapter as it
    was placed (the last ``pooled`` reading, whole); and after each step, the pool's extent,
    the places read and the numbers there. Every reading's extent is within the numbers the
    layout placed: the harness writes no other number of the pool. The start is the last
    placing before the first step (a later one is a tensor the program added after), or, where
    the harness read it (``start``), the pool as the first step of any optimizer found it: a
    loop may give its adapter its values after making the optimizer (red team 8 F8)."""

    def __init__(self, seen: dict, run: _Run, used: int) -> None:
        labels = _labels(seen)
        reads = [(labels.get(i, ""), r) for i, r in enumerate(seen["snapshots"])]
        reads.append(("memory-end", seen["final_params"]))
        initial: dict[int, torch.Tensor] = {}
        self.moved = 0.0
        self.start: torch.Tensor | None = None
        self.after: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        started = False
        for label, read in reads:
            parsed = harness.parse(read, run.sizes) if isinstance(read, list) else None
            if parsed is None:
                raise Interfered("shape", detail="the supervisor's reading has no shape of the harness's")
            seed, at, base, extent, numbers = parsed
            whole = label in harness.WHOLE
            idx = None if whole else harness.pool_places(seed, extent)
            if extent > used or len(numbers) != (extent if idx is None else len(idx)):
                raise Interfered("shape", detail="the adapter's pool holds numbers no tensor was placed in")
            if seed not in initial:
                initial[seed] = torch.cat([w[p] for w, p in zip(run.weights, at, strict=True)])
            first = initial[seed]
            gap = tensors.norm(tensors.vector(base).nan_to_num() - first) / tensors.norm(first)
            self.moved = max(self.moved, gap)
            values = tensors.vector(numbers)
            if label == "start" or (label == "pooled" and not self.after and not started):
                # placed before the first step, or as the first step found it
                self.start = torch.cat([values, torch.zeros(used - extent, dtype=torch.float64)])
                started = started or label == "start"
            elif label == "step":
                assert idx is not None
                self.after.append((extent, idx, values))


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    _well_formed(data)
    run = run_of(params)
    dims = _dims(params)
    n_batches = int(params["n_micro"])
    layout = reported(data, "pooled")
    shapes = [e["shape"] for e in layout]
    used = sum(math.prod(e["shape"]) for e in layout if e["offset"] >= 0)
    reads = _Reads(seen, run, used)
    moved = reads.moved
    unchanged = Check(
        "frozen-unchanged",
        moved == 0,
        "check.frozen-unchanged.passed" if moved == 0 else "check.frozen-unchanged.failed",
        {"moved": Sci(moved)},
    )
    steps = reported(data, "steps")
    graded = max([len(s["base_grads"]) for s in steps] + list(reported(data, "base_grads")) + [0])
    no_grad = _no_grad_check(params, data, seen, graded)
    base_state = max([s["base_state"] for s in steps] + [0])
    in_optimizer = len({i for owned in reported(data, "optimizers") for i in owned if i >= 0})
    state_ok = base_state == 0 and bool(steps)
    state = Check(
        "adapter-state",
        state_ok,
        "check.adapter-state.passed" if state_ok else "check.adapter-state.failed",
        {"state": base_state, "listed": in_optimizer},
    )
    checks = [unchanged, no_grad, state]
    unread = [e["shape"] for e in layout if e["offset"] < 0]
    found = _delta(shapes, dims) if not unread and reads.start is not None else None
    start_size = None
    rank, asked, moved_by = None, int(params["rank"]), 0.0
    stepped = int(seen["counts"].get("step", 0))
    if found is None:
        key = "check.adapter.unread" if unread else "check.adapter.shapes"
        values = {"shapes": str(unread or shapes), "count": len(shapes), "asked": asked}
        values |= {"hidden": dims[0], "classes": dims[1], "pool": harness.POOL}
        if not unread and len(shapes) > 2:
            key = "check.adapter-rank.tensors"
        checks.append(Check("adapter-rank", False, key, values))
        checks.append(Check("starts-unchanged", False, key, values))
        checks.append(Check("adapter-trajectory", False, key, values))
        named = _delta(shapes, dims)  # the shapes the program reported: they only name a mistake
        if named is not None:
            rank = named[0]
    else:
        assert reads.start is not None
        rank, delta = found
        checks.append(_rank_check(rank, asked))
        first = _shaped(reads.start.tolist(), shapes)
        start_size = _size(delta, first)
        zero = start_size == 0
        checks.append(
            Check(
                "starts-unchanged",
                zero,
                "check.starts-unchanged.passed" if zero else "check.starts-unchanged.failed",
                {"size": Sci(start_size)},
            )
        )
        ref = _replay(run, first, delta) if stepped == n_batches == len(reads.after) else None
        trajectory = _trajectory(reads, ref, stepped, n_batches, device)
        coarse = _coarse(reported(data, "outputs"))
        if not trajectory.passed and coarse and ref is not None:  # F1: the loss in another dtype
            trajectory = Check(
                "adapter-trajectory",
                False,
                "check.adapter-trajectory.dtype",
                trajectory.values | {"dtype": coarse},
            )
        checks.append(trajectory)
        moved_by = _moved(reads)
        checks.append(_moved_check(moved_by, stepped))
        if (
            moved == 0 and ref is not None
        ):  # recomputed on the frozen model: where it moved, its own line fails
            values_ = [tensors.flat(first), *ref]
            checks.append(_output_check(run, data, values_, shapes, delta, rank, device))
    adapter_numbers = sum(math.prod(s) for s in shapes) if found else 0
    model_numbers = sum(run.sizes)
    handed = {i for owned in reported(data, "optimizers") for i in owned if 0 <= i < len(run.sizes)}
    metrics = {
        "adapter_parameters": adapter_numbers,
        "model_parameters": model_numbers,
        # what the optimizers were handed: the model's own weights and the learner's new tensors
        "trained_parameters": sum(run.sizes[i] for i in handed) + sum(math.prod(s) for s in shapes),
        "peak_gradient_bytes": max([s["grad_bytes"] for s in steps] + [0]),
        "full_gradient_bytes": model_numbers * 8,
        "optimizer_state_bytes": max([s["state_bytes"] for s in steps] + [0]),
        "full_optimizer_state_bytes": model_numbers * 16,
    }
    metrics |= {"charts": _charts(metrics), "facts": []}
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = _diagnose(moved, graded, in_optimizer, base_state, start_size, bool(shapes))
        if diagnosis is None and rank is not None:
            diagnosis = _diagnose_adapter(rank, asked, dims, moved_by, reads, stepped)
    return Evaluation(checks, diagnosis, metrics)


FIGURE = "figure.adapter"  # the texts of the kind's charts: messages.d/adapter.yaml


def _charts(metrics: dict[str, Any]) -> list[ChartRecord]:
    """What the page draws (``contracts.verdict``'s declared charts): the learner's loop against
    full fine-tuning, in gradient bytes, optimizer state and numbers trained (bars from zero)."""
    return [
        chart(
            chart_id,
            unit,
            [
                (f"{FIGURE}.{texts}.yours", "yours", metrics[yours]),
                (f"{FIGURE}.{texts}.full", "naive", metrics[full]),
            ],
            f"{FIGURE}.{texts}",
        )
        for chart_id, texts, unit, yours, full in (
            ("gradients", "gradients", "bytes", "peak_gradient_bytes", "full_gradient_bytes"),
            ("optimizer-state", "state", "bytes", "optimizer_state_bytes", "full_optimizer_state_bytes"),
            ("trained", "trained", "count", "trained_parameters", "model_parameters"),
        )
    ]


def _gap(rows: list[list[Any]], expected: torch.Tensor) -> float:
    """How far ``rows`` are from being rows of ``expected``: the most any row is from its
    nearest row there, relative to the size of ``expected``."""
    got = torch.tensor([[float("inf") if v is None else v for v in r] for r in rows], dtype=torch.float64)
    if not got.numel():
        return 0.0
    scale = 1.0 + float(expected.abs().max())
    gaps = (got[:, None, :] - expected[None, :, :]).abs().amax(dim=2)
    return float(gaps.amin(dim=1).max().nan_to_num(nan=float("inf"))) / scale


def _close(rows: list[list[Any]], expected: torch.Tensor, tol: float) -> bool:
    """Every row of ``rows`` is one of ``expected``'s to ``tol`` (relative to its size)."""
    return _gap(rows, expected) <= tol


def _coarse(outputs: list[dict[str, Any]]) -> str | None:
    """The dtype, not float64, of an output the program trained on (one that required a
    gradient) that it handed ``loss_fn``; None where every such output was float64."""
    return next(
        (str(o["dtype"]) for o in outputs if o.get("grad") and o.get("dtype", "float64") != "float64"), None
    )


def _output_check(
    run: _Run,
    data: dict,
    values: list[torch.Tensor],
    shapes: list[list[int]],
    delta: Delta,
    rank: int,
    device: str,
) -> Check:
    """What the program reported its model computed, against the frozen model plus the adapter
    the supervisor read (its start, and Adam's replay from there, which matched its reads after
    every step): each output handed to ``loss_fn`` (with the adapter as it was after the steps
    taken then), and the model's output once ``train`` returned (with the adapter in it, or the
    frozen model's own where the program kept the adapter beside the model), at the columns the
    harness recorded. A report: it fails a loop, and where it says nothing the line rests on
    what the supervisor read."""
    h, base = run.hidden()
    tol = OUTPUT_TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    cols = run.cols

    def adapted(k: int) -> torch.Tensor:
        with torch.no_grad():
            return (base + delta(h, _shaped(values[k].tolist(), shapes)))[:, cols]

    outputs = reported(data, "outputs")
    for number, out in enumerate(outputs):
        k = out["steps"]
        rows = out["values"]
        # an output of a coarser dtype to its own rounding; the frozen model's alone (its loss
        # logged with the adapter off, or before it was put in: red team 8 F4) is no other change
        own = max(tol, DTYPE_TOLERANCE.get(str(out.get("dtype", "float64")), tol))
        if rows is not None and 0 <= k < len(values):
            gap = _gap(rows, adapted(k))
            if gap <= own or _close(rows, base[:, cols], own):
                continue
            values_ = {"call": number + 1, "steps": k, "rank": rank, "gap": Sci(gap)}
            if gap <= ROUNDING:  # rounding: from float64 outputs, or drift from a coarser loss
                return Check("adapter-output", False, "check.adapter-output.rounding", values_)
        values_ = {"call": number + 1, "steps": k, "rank": rank}
        return Check("adapter-output", False, "check.adapter-output.call", values_)
    probe = reported(data, "probe")
    if probe is not None:
        rows = probe["values"]
        if rows is None:
            error = str(probe.get("error", ""))[:40] or "?"
            return Check("adapter-output", False, "check.adapter-output.error", {"error": error})
        if len(rows) != len(base) or not (
            _close(rows, adapted(len(values) - 1), tol) or _close(rows, base[:, cols], tol)
        ):
            return Check("adapter-output", False, "check.adapter-output.probe", {"rank": rank})
    return Check("adapter-output", True, "check.adapter-output.passed", {"calls": len(outputs), "rank": rank})


def _no_grad_check(params: dict, data: dict, seen: dict, graded: int) -> Check:
    """No gradient for the model's own weights. The gradients the child reported (``graded``, the
    most of the model's weights that had one at a step or a batch) name the mistake. A pass rests
    on the one run: the process's memory, as the kernel counted it, rose by less than
    ``FROZEN_FACTOR`` of the smallest weight's gradient over the learner's call, and ``HELD``
    more from the learner's file's load. On CUDA, where no child is watched, the line says it is
    the program's word (docs/security.md, "What a pass rests on")."""
    if graded:
        return Check("frozen-no-grad", False, "check.frozen-no-grad.failed", {"grads": graded})
    if not kernel_memory.watched(seen):
        return Check("frozen-no-grad", True, "check.frozen-no-grad.reported", {"grads": 0})
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    d_in, hidden, classes = (int(params[k]) for k in ("inputs", "hidden", "classes"))
    gradient = min(d_in, classes) * hidden * 8  # the smallest weight's gradient, float64
    limit = int(FROZEN_FACTOR * gradient)
    values = {"rise": rise, "since": since, "gradient": gradient, "limit": limit, "held": limit + HELD}
    values |= {"inputs": d_in, "hidden": hidden, "classes": classes}
    fetched, batches = seen["counts"].get("batch", 0), int(params["n_micro"])
    if fetched < batches:  # a run that trained on nothing has no figure to go by
        values |= {"fetched": fetched, "batches": batches}
        return Check("frozen-no-grad", False, "check.frozen-no-grad.untrained", values)
    if rise > limit:
        full = reported(data, "full_size")
        if isinstance(full, list) and len(full) == 2:  # F2: the adapter's update made at full size
            rows, cols = full
            values |= {"rows": rows, "cols": cols, "size": rows * cols * 8}
            values |= {"batch": int(params["micro_batch"]), "rank": int(params["rank"])}
            return Check("frozen-no-grad", False, "check.frozen-no-grad.full-size", values)
        return Check("frozen-no-grad", False, "check.frozen-no-grad.kernel", values)
    if since > limit + HELD:
        return Check("frozen-no-grad", False, "check.frozen-no-grad.held", values)
    return Check("frozen-no-grad", True, "check.frozen-no-grad.passed", values)


def _rank_check(rank: int, asked: int) -> Check:
    """The adapter's rank against the exercise's: a rank of its own (8 where 2 was asked, or
    0: two empty matrices) is not the adapter asked for, however well it trains."""
    values = {"rank": rank, "asked": asked}
    if rank == asked:
        return Check("adapter-rank", True, "check.adapter-rank.passed", values)
    return Check("adapter-rank", False, "check.adapter-rank.failed", values)


def _moved(reads: _Reads) -> float:
    """The largest change of any adapter number the supervisor read at the last step, from
    where it was placed."""
    if reads.start is None or not reads.after:
        return 0.0
    _extent, idx, values = reads.after[-1]
    if not len(idx):
        return 0.0
    return float((values - reads.start[idx]).abs().max().nan_to_num(nan=float("inf")))


def _moved_check(moved_by: float, steps: int) -> Check:
    """A trained parameter must have moved: the replay alone agrees with an adapter that
    never could (zero gradients leave Adam where it started)."""
    values = {"moved": Sci(moved_by), "steps": steps}
    if moved_by > 0:
        return Check("adapter-moved", True, "check.adapter-moved.passed", values)
    return Check("adapter-moved", False, "check.adapter-moved.failed", values)


def _diagnose_adapter(
    rank: int, asked: int, dims: tuple[int, int], moved_by: float, reads: _Reads, steps: int
) -> Diagnosis | None:
    """The adapter's own mistakes, once the model is frozen right: its rank, or no training."""
    per_rank = dims[0] + dims[1]
    shape = {"hidden": dims[0], "classes": dims[1]}
    if rank == 0:
        return Diagnosis("empty-adapter", {"asked": asked, "asked_numbers": asked * per_rank} | shape)
    if rank != asked:
        values = {
            "rank": rank,
            "asked": asked,
            "numbers": rank * per_rank,
            "asked_numbers": asked * per_rank,
        }
        return Diagnosis("adapter-wrong-rank", values | shape)
    start = reads.start
    if moved_by == 0 and start is not None and bool((start == 0).all()):
        return Diagnosis("adapter-never-trains", {"steps": steps, "numbers": int(start.numel())})
    return None


def _trajectory(
    reads: _Reads, ref: list[torch.Tensor] | None, steps: int, n_batches: int, device: str
) -> Check:
    """The adapter after each step, as the supervisor read it (at the places it drew; numbers
    past the pool's extent are zero), against Adam replayed here from where it was placed."""
    if ref is None:
        return Check(
            "adapter-trajectory",
            False,
            "check.adapter-trajectory.steps",
            {"steps": steps, "expected": n_batches},
        )
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    errors = []
    for (extent, idx, values), r in zip(reads.after, ref, strict=True):
        expected = torch.cat([r[idx], r[extent:]])
        gap = torch.cat([values.nan_to_num(nan=float("inf")) - r[idx], r[extent:]])
        errors.append(tensors.norm(gap) / max(tensors.norm(expected), 1e-300))
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values_ = {"step": bad + 1, "error": Sci(errors[bad])}
        return Check("adapter-trajectory", False, "check.adapter-trajectory.failed", values_)
    return Check("adapter-trajectory", True, "check.adapter-trajectory.passed", {"error": Sci(max(errors))})


def _diagnose(moved, graded, in_optimizer, base_state, start_size, adapter):
    """The known mistake the trace shows, or None. ``adapter``: the optimizer was handed new
    tensors besides the model's (the starter's full fine-tuning has none)."""
    if moved > 0 and in_optimizer:
        what = Phrase("token.adapter.on_top" if adapter else "token.adapter.none")
        values = {"listed": in_optimizer, "state": base_state, "what": what}
        return Diagnosis("optimizer-over-all-parameters", values)
    if graded and moved == 0:
        return Diagnosis("base-not-frozen", {"grads": graded})
    if start_size is not None and start_size > 0:
        return Diagnosis("adapter-changes-output", {"size": Sci(start_size)})
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
