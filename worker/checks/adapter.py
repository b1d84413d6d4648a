"""Checks of the "adapter" kind (lesson 5).

The model is the seeded float64 MLP (``Linear(6, 16)``, ``Tanh``, ``Linear(16, 3)``), frozen; the
learner trains two matrices beside its last layer, which then computes ``layer(h) + h @ (A @ B)``
(A ``16 × rank``, B ``rank × 3``, or the transposed weights of two bias-free ``nn.Linear``).
Passing means: the model's weights never move (read by the sandbox's supervisor) and never get a
gradient (the kernel's count of the process on a memory run whose base has a first layer wide
enough that its gradient is tens of MiB; the gradients the child reports only name the
mistake); the optimizer keeps state for the adapter only; the tensors the optimizers updated
besides the model's, as the supervisor read them in the pool the harness put them in
(``worker/harness/adapter.py``), are two that make an adapter of the rank the exercise asks for
(``params["rank"]``): an adapter of another rank trained beside a decoy of the asked one has four;
it adds nothing at step 0; its values after every step, read by the supervisor at that step,
equal a trusted float64 replay of Adam on the CPU, from the values it was placed with; and it
moved. The last one is not implied by the replay: an adapter whose ``A`` and ``B`` both start at
zero gets zero gradients, and Adam from there stays put too, so the replay agrees with an adapter
that never trained (and so would one of rank 0, two empty matrices).

The child's reports fail a loop, never pass one: every output it handed ``loss_fn``, and the
model's output on the run's inputs once ``train`` returned, are recomputed here from the frozen
model and the adapter the supervisor read (``adapter-output``): a model changed by anything else
(another adapter, trained by hand or by an optimizer of the program's own) fails. Where the
program says nothing (no output recorded, its model not adapted in place), the line passes on
what the supervisor read alone.
"""

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch

from contracts.messages import Phrase, Sci
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
from worker.harness import adapter as harness
from worker.harness import scenarios
from worker.harness.protocol import reported

TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}  # relative, on the adapter's values after each step
# on an output the program reported, relative to the largest output: the same sums in another
# order are ~1e-16 apart in float64; another adapter beside it, ~1e-2
OUTPUT_TOLERANCE = {"cpu": 1e-9, "cuda": 1e-6}
D_IN, D_OUT = 16, 3
# The memory run (``scenarios.wide_base``: a first layer 262,144 wide, whose weight's gradient
# alone is 32 MiB), as the kernel counts the process: a frozen base rises by 0.1-0.2 MiB, one that
# gets gradients by 32 MiB or more (measured); the line, a share of that gradient's bytes
FROZEN_FACTOR = 0.25
# What a right loop may hold from before its memory run, since the supervisor began to watch (as
# the learner's file was loaded; the harness pages torch's code in before that): the maths run's
# leftovers, the learner's module (measured: 1-2 MiB). A loop that holds memory into the run and
# frees it there (a ballast) lowers the rise by as much, never this
HELD = 4 << 20

Delta = Callable[[list[torch.Tensor]], torch.Tensor]


def _delta(shapes: list[list[int]]) -> tuple[int, Delta] | None:
    """How two matrices of these shapes make the ``16 × 3`` update ``h @ delta``, and their rank:
    A @ B, or ``nn.Linear`` weights (``rank × 16`` then ``3 × rank``) as ``A.T @ B.T``; None
    otherwise."""
    if len(shapes) != 2 or any(len(s) != 2 for s in shapes):
        return None
    for order in itertools.permutations(range(2)):
        first, second = (shapes[i] for i in order)
        if first[0] == D_IN and first[1] == second[0] and second[1] == D_OUT:
            return first[1], lambda ps, o=order: ps[o[0]] @ ps[o[1]]
        if first[1] == D_IN and first[0] == second[1] and second[0] == D_OUT:
            return first[0], lambda ps, o=order: ps[o[0]].T @ ps[o[1]].T
    return None


def _shaped(values: list[Any], shapes: list[list[int]]) -> list[torch.Tensor]:
    flat = tensors.vector(values)
    out, at = [], 0
    for shape in shapes:
        n = shape[0] * shape[1]
        out.append(flat[at : at + n].reshape(shape).clone())
        at += n
    return out


def _replay(params: dict, start: list[torch.Tensor], delta: Delta) -> list[torch.Tensor]:
    """The adapter's values after each batch: Adam over it beside the frozen model, in float64."""
    with SEEDING:
        scenario = scenarios.build(params)
    model = scenario.model.requires_grad_(False)
    adapter = [t.clone().requires_grad_(True) for t in start]
    optimizer = torch.optim.Adam(adapter, lr=float(params["lr"]))
    after = []
    for x, y in scenario.micro_batches:
        h = model[1](model[0](x))
        scenario.loss_fn(model[2](h) + h @ delta(adapter), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(adapter))
    return after


def _initial(params: dict) -> tuple[torch.Tensor, list[int]]:
    """The model's parameters before training, flat, and how many numbers each holds."""
    with SEEDING:
        weights = list(scenarios.build(params).model.parameters())
    return tensors.flat(weights), [p.numel() for p in weights]


def _ints(values: object) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def _numbers(values: object) -> bool:
    return isinstance(values, list) and all(v is None or type(v) in (int, float) for v in values)


def _rows_ok(rows: object) -> bool:
    return rows is None or (isinstance(rows, list) and all(_numbers(r) and len(r) == 3 for r in rows))


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
    ok = ok and (probe is None or (isinstance(probe, dict) and _rows_ok(probe.get("values"))))
    if not ok:
        raise Interfered("shape", detail="the reported steps do not have the harness's shape")


def _pool_reads(seen: dict, size: int, layout: list[dict]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The adapter as the supervisor read it in the harness's pool: when it was placed (the
    last ``pooled`` sync) and after each step (``step`` syncs), flat in the layout's order.
    Numbers of the pool outside the tensors placed never change: the harness writes none."""
    used = sum(math.prod(e["shape"]) for e in layout if e["offset"] >= 0)
    reads = [*seen["snapshots"], seen["final_params"]]
    for read in reads:
        if len(read) != size + harness.POOL or any(v != 0 for v in read[size + used :]):
            raise Interfered("shape", detail="the adapter's pool holds numbers no tensor was placed in")
    placed = snapshots(seen, "pooled")
    start = [tensors.vector(placed[-1][size : size + used])] if placed else []
    after = [tensors.vector(r[size : size + used]) for r in snapshots(seen, "step")]
    return start, after


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    seen = observed(data)
    _well_formed(data)
    initial, sizes = _initial(params)
    size = int(initial.numel())
    agree(reported(data, "final_params"), seen["final_params"][:size], "parameters")
    n_batches = int(params["n_micro"])
    read = [*seen["snapshots"], seen["final_params"]]
    moved = max(tensors.norm(tensors.vector(s[:size]).nan_to_num() - initial) for s in read) / tensors.norm(
        initial
    )
    unchanged = Check(
        "frozen-unchanged",
        moved == 0,
        "check.frozen-unchanged.passed" if moved == 0 else "check.frozen-unchanged.failed",
        {"moved": Sci(moved)},
    )
    steps = reported(data, "steps")
    graded = max([len(s["base_grads"]) for s in steps] + list(reported(data, "base_grads")) + [0])
    no_grad = _no_grad_check(params, seen, graded)
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
    layout = reported(data, "pooled")
    shapes = [e["shape"] for e in layout]
    start, after = _pool_reads(seen, size, layout)
    unread = [e["shape"] for e in layout if e["offset"] < 0]
    found = _delta(shapes) if not unread and start else None
    start_size = None
    rank, asked, moved_by = None, int(params["rank"]), 0.0
    if found is None:
        key = "check.adapter.unread" if unread else "check.adapter.shapes"
        values = {"shapes": str(unread or shapes), "count": len(shapes), "asked": asked}
        if not unread and len(shapes) > 2:
            key = "check.adapter-rank.tensors"
        checks.append(Check("adapter-rank", False, key, values))
        checks.append(Check("starts-unchanged", False, key, values))
        checks.append(Check("adapter-trajectory", False, key, values))
    else:
        rank, delta = found
        checks.append(_rank_check(rank, asked))
        first = _shaped(start[0].tolist(), shapes)
        start_size = float(delta(first).abs().max().nan_to_num(nan=float("inf")))
        zero = start_size == 0
        checks.append(
            Check(
                "starts-unchanged",
                zero,
                "check.starts-unchanged.passed" if zero else "check.starts-unchanged.failed",
                {"size": Sci(start_size)},
            )
        )
        checks.append(_trajectory(params, after, first, delta, n_batches, device))
        moved_by = _moved(start[0], after)
        checks.append(_moved_check(moved_by, len(after)))
        if moved == 0:  # recomputed on the frozen model: where it moved, its own line fails
            checks.append(_output_check(params, data, [start[0], *after], shapes, delta, rank, device))
    adapter_numbers = sum(math.prod(s) for s in shapes) if found else 0
    model_numbers = size
    handed = {i for owned in reported(data, "optimizers") for i in owned if 0 <= i < len(sizes)}
    metrics = {
        "adapter_parameters": adapter_numbers,
        "model_parameters": model_numbers,
        # what the optimizers were handed: the model's own weights and the learner's new tensors
        "trained_parameters": sum(sizes[i] for i in handed) + sum(math.prod(s) for s in shapes),
        "peak_gradient_bytes": max([s["grad_bytes"] for s in steps] + [0]),
        "full_gradient_bytes": model_numbers * 8,
        "optimizer_state_bytes": max([s["state_bytes"] for s in steps] + [0]),
        "full_optimizer_state_bytes": model_numbers * 16,
    }
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = _diagnose(moved, graded, in_optimizer, base_state, start_size, bool(shapes))
        if diagnosis is None and rank is not None:
            diagnosis = _diagnose_adapter(rank, asked, moved_by, start[0], len(after))
    return Evaluation(checks, diagnosis, metrics)


def _outputs(params: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The frozen model on the run's inputs, all batches in order: ``h`` (what the last layer
    takes) and its output."""
    with SEEDING:
        scenario = scenarios.build(params)
    model = scenario.model.requires_grad_(False)
    with torch.no_grad():
        x = torch.cat([x for x, _y in scenario.micro_batches])
        h = model[1](model[0](x))
        return h, model[2](h)


def _close(rows: list[list[Any]], expected: torch.Tensor, tol: float) -> bool:
    """Every row of ``rows`` is one of ``expected``'s to ``tol`` (relative to its size)."""
    got = torch.tensor([[float("inf") if v is None else v for v in r] for r in rows], dtype=torch.float64)
    if not got.numel():
        return True
    scale = 1.0 + float(expected.abs().max())
    gaps = (got[:, None, :] - expected[None, :, :]).abs().amax(dim=2)
    return bool((gaps.amin(dim=1) <= tol * scale).all())


def _output_check(
    params: dict,
    data: dict,
    values: list[torch.Tensor],
    shapes: list[list[int]],
    delta: Delta,
    rank: int,
    device: str,
) -> Check:
    """What the program reported its model computed, against the frozen model plus the adapter
    the supervisor read: each output handed to ``loss_fn`` (with the adapter as it was after the
    steps taken then), and the model's output once ``train`` returned (with the adapter in it,
    or the frozen model's own where the program kept the adapter beside the model). A report:
    it fails a loop, and where it says nothing the line rests on what the supervisor read."""
    h, base = _outputs(params)
    tol = OUTPUT_TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]

    def adapted(k: int) -> torch.Tensor:
        with torch.no_grad():
            return base + h @ delta(_shaped(values[k].tolist(), shapes))

    outputs = reported(data, "outputs")
    for number, out in enumerate(outputs):
        k = out["steps"]
        rows = out["values"]
        ok = rows is not None and 0 <= k < len(values) and _close(rows, adapted(k), tol)
        if not ok:
            values_ = {"call": number + 1, "steps": k, "rank": rank}
            return Check("adapter-output", False, "check.adapter-output.call", values_)
    probe = reported(data, "probe")
    if probe is not None:
        rows = probe["values"]
        if rows is None:
            error = str(probe.get("error", ""))[:40] or "?"
            return Check("adapter-output", False, "check.adapter-output.error", {"error": error})
        if len(rows) != len(base) or not (
            _close(rows, adapted(len(values) - 1), tol) or _close(rows, base, tol)
        ):
            return Check("adapter-output", False, "check.adapter-output.probe", {"rank": rank})
    return Check("adapter-output", True, "check.adapter-output.passed", {"calls": len(outputs), "rank": rank})


def _no_grad_check(params: dict, seen: dict, graded: int) -> Check:
    """No gradient for the model's own weights. The gradients the child reported (``graded``, the
    most of the model's weights that had one at a step or a batch) name the mistake. A pass rests
    on the memory run (``params["memory_width"]``): run on a base with a wide first layer, the
    process's memory, as the kernel counted it, rose by less than ``FROZEN_FACTOR`` of that
    layer's gradient from the run's start, and ``HELD`` more from the learner's file's load.
    Without one (or on CUDA, where no child is watched) the line says it is the program's word
    (docs/security.md, "What a pass rests on")."""
    if graded:
        return Check("frozen-no-grad", False, "check.frozen-no-grad.failed", {"grads": graded})
    width = int(params.get("memory_width") or 0)
    if not width or not kernel_memory.watched(seen):
        return Check("frozen-no-grad", True, "check.frozen-no-grad.reported", {"grads": 0})
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    gradient = width * D_IN * 8  # the wide layer's weight's gradient, float64
    limit = int(FROZEN_FACTOR * gradient)
    values = {"rise": rise, "since": since, "width": width, "gradient": gradient, "limit": limit}
    values |= {"held": limit + HELD}
    fetched = seen["counts"].get("memory-batch", 0)
    if fetched < scenarios.WIDE_BATCHES:  # a run that trained on nothing has no figure to go by
        values |= {"fetched": fetched, "batches": scenarios.WIDE_BATCHES}
        return Check("frozen-no-grad", False, "check.frozen-no-grad.untrained", values)
    if rise > limit:
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


def _moved(start: torch.Tensor, after: list[torch.Tensor]) -> float:
    """The largest change of any adapter number, from where it was placed to its last step, as
    the supervisor read them."""
    if not start.numel() or not after:
        return 0.0
    return float((after[-1] - start).abs().max().nan_to_num(nan=float("inf")))


def _moved_check(moved_by: float, steps: int) -> Check:
    """A trained parameter must have moved: the replay alone agrees with an adapter that
    never could (zero gradients leave Adam where it started)."""
    values = {"moved": Sci(moved_by), "steps": steps}
    if moved_by > 0:
        return Check("adapter-moved", True, "check.adapter-moved.passed", values)
    return Check("adapter-moved", False, "check.adapter-moved.failed", values)


def _diagnose_adapter(
    rank: int, asked: int, moved_by: float, start: torch.Tensor, steps: int
) -> Diagnosis | None:
    """The adapter's own mistakes, once the model is frozen right: its rank, or no training."""
    if rank == 0:
        return Diagnosis("empty-adapter", {"asked": asked, "asked_numbers": asked * (D_IN + D_OUT)})
    if rank != asked:
        values = {
            "rank": rank,
            "asked": asked,
            "numbers": rank * (D_IN + D_OUT),
            "asked_numbers": asked * (D_IN + D_OUT),
        }
        return Diagnosis("adapter-wrong-rank", values)
    if moved_by == 0 and bool((start == 0).all()):
        return Diagnosis("adapter-never-trains", {"steps": steps, "numbers": int(start.numel())})
    return None


def _trajectory(
    params: dict,
    after: list[torch.Tensor],
    start: list[torch.Tensor],
    delta: Delta,
    n_batches: int,
    device: str,
) -> Check:
    """The adapter after each step, as the supervisor read it, against Adam replayed here from
    where it was placed."""
    if len(after) != n_batches:
        return Check(
            "adapter-trajectory",
            False,
            "check.adapter-trajectory.steps",
            {"steps": len(after), "expected": n_batches},
        )
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    ref = _replay(params, start, delta)
    errors = []
    for mine, r in zip(after, ref, strict=True):
        mine = mine.nan_to_num(nan=float("inf"))
        errors.append(tensors.norm(mine - r) / max(tensors.norm(r), 1e-300) if mine.shape == r.shape else 1.0)
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values = {"step": bad + 1, "error": Sci(errors[bad])}
        return Check("adapter-trajectory", False, "check.adapter-trajectory.failed", values)
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
