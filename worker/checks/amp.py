"""Checks of the "amp" kind (lesson 1; docs/architecture.md, "Tolerances").

The reference is the instructor's AMP loop run here on the same seeded scenario, under the
same autocast dtype and device (not float64: autocast changes the numbers on purpose).
The learner passes when the linear layers ran in the 16-bit dtype and the loss in
float32, every step went through the scaler in order (scale → backward → unscale_ → clip →
step → update) with the right gradients flowing through it (the clip and the step see the
true gradient of the learner's own weights at that batch, recomputed here, not a scaled or
doubly unscaled one), the batch with an inf left the weights untouched and halved the scale,
and the parameters before every batch match the reference's.
"""

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from contracts.messages import Phrase, Sci  # noqa: E402
from contracts.verdict import fact  # noqa: E402
from worker.checks import (  # noqa: E402
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    agree,
    observed,
    snapshots,
    tensors,
)
from worker.harness import scenarios  # noqa: E402
from worker.harness.protocol import reported  # noqa: E402

# error = max over batches |θ − θ_ref| / |θ_ref,end − θ_0|: correct loops on the CPU are
# bitwise equal (0.0), CUDA kernels may round differently; a float16 loss is 8.8e-4 off,
# an fp32 forward 7.7e-4, the scaler mistakes ≥ 0.5 or NaN
TOLERANCE = {"cpu": 1e-4, "cuda": 1e-2}
# a gradient norm seen by the clip or the step, over the true one: 1 when right (float16
# rounding moves it by < 1 %: 0.717 in float16 autocast, 0.717 in float32 on batch 0), the
# loss scale (2**10 and up) or its inverse when not
FLOW = (0.5, 2.0)


@dataclass(frozen=True)
class Reference:
    snapshots: list  # parameters before every batch, then after the last
    scales: list  # the scale before every batch, then after the last
    clip_norms: list  # the true (unscaled) gradient norm at every batch


@lru_cache(maxsize=8)
def _reference(key: str, device: str) -> Reference:
    params = json.loads(key)
    model, batches, loss_fn = scenarios.amp_batches(params, device)
    device_type = torch.device(device).type
    dtype = getattr(torch, params["amp_dtype"])
    optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
    scaler = torch.amp.GradScaler(
        device_type, init_scale=float(params["init_scale"]), growth_interval=int(params["growth_interval"])
    )
    snapshots, scales, norms = [], [], []
    for x, y in batches:
        snapshots.append(tensors.flat(model.parameters()))
        scales.append(float(scaler.get_scale()))
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), float(params["max_norm"]))))
        scaler.step(optimizer)
        scaler.update()
    snapshots.append(tensors.flat(model.parameters()))
    scales.append(float(scaler.get_scale()))
    return Reference(snapshots, scales, norms)


def reference(params: dict, device: str) -> Reference:
    """The instructor's run of ``params`` on ``device`` (the CPU when CUDA is absent)."""
    if not (device.startswith("cuda") and torch.cuda.is_available()):
        device = "cpu"
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True), device)


def prepare(params: dict, device: str) -> None:
    reference(params, device)


def _count(events, code):
    return sum(1 for e in events if e[0] == code)


MAX_SNAPSHOTS = 128  # the harness records the first 128 forwards


def _observations(data):
    """The parameters and the GradScaler's scale the supervisor read before every forward and
    at the end (``worker/harness/amp.py``: the scale is the last number of each reading): the
    child's report must hold the same, or the run was interfered with. Returns the readings
    at each reported forward, and the one at the end."""
    seen = observed(data)
    shots = snapshots(seen, "forward")
    told = reported(data, "snapshots")
    agree(len(told), min(len(shots), MAX_SNAPSHOTS), "forwards")
    shots = shots[: len(told)]
    agree([s["params"] for s in told], [shot[:-1] for shot in shots], "parameters")
    agree([s["scale"] for s in told], [shot[-1] for shot in shots], "parameters")
    final = seen["final_params"]
    agree(reported(data, "final_params"), final[:-1], "parameters")
    agree(reported(data, "final_scale"), final[-1], "parameters")
    return shots, final


def _rank(snap: dict[str, Any]) -> int:
    """How well a forward stands for its batch: 0 when a backward reached it (the forward the
    batch trained on), 1 when it ran with gradients on, 2 otherwise (an evaluation, a logged
    loss under ``no_grad``, a warm-up pass: they only look)."""
    if snap.get("trained") is True:
        return 0
    return 1 if snap.get("grad") is True else 2


def _learner_snapshots(data, n):
    """Parameters and scale before each batch, then at the end: the supervisor's readings, at
    the forward each batch trained on (the first of its forwards that a backward reached; else
    the first with gradients on; else its first), so a forward that only looks, before or
    between batches, stands for none of them (issue 41, red team 5 R4: the starting loss of
    every batch printed under ``no_grad`` first moved every reading to the start, and a right
    loop was refused with three false claims). Which forward is which batch's, and whether
    it trained, comes with the child's record: it only chooses among the supervisor's
    readings (a wrong choice leaves a batch unseen, or reads weights the loop really had)."""
    shots, final = _observations(data)
    best: dict[int, tuple[int, dict[str, Any]]] = {}
    for snap, shot in zip(reported(data, "snapshots"), shots, strict=True):
        rank = _rank(snap)
        held = best.get(snap["batch"])
        if held is None or rank < held[0]:
            best[snap["batch"]] = (rank, {"batch": snap["batch"], "params": shot[:-1], "scale": shot[-1]})
    found = [best[i][1] if i in best else None for i in range(n)]
    end = {"params": final[:-1], "scale": final[-1]}
    return found + [end]


# ---------------------------------------------------------------- outcome


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    ref = reference(params, device)
    n = len(ref.snapshots) - 1
    mine = _learner_snapshots(data, n)
    wanted = params["amp_dtype"]

    flow = _flow(params, data, mine)
    checks = [_autocast_check(data, wanted), _order_check(data, n, flow)]
    checks.append(_overflow_check(params, mine))
    checks.append(_scale_check(ref, mine))
    tol = float(params.get("tolerance", TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]))
    travelled = tensors.norm(ref.snapshots[-1] - ref.snapshots[0])
    errors = [
        (tensors.norm(tensors.vector(s["params"]) - ref.snapshots[i]) / travelled) if s else math.inf
        for i, s in enumerate(mine)
    ]
    worst = max(range(len(errors)), key=lambda i: errors[i] if math.isfinite(errors[i]) else 1e300)
    error = errors[worst]
    if all(e <= tol for e in errors):
        checks.append(Check("amp_trajectory", True, "check.amp_trajectory.passed", {"error": Sci(error)}))
    else:
        checks.append(_trajectory_failed(mine, errors, tol))
    metrics = {
        "linear_dtypes": reported(data, "linear_dtypes"),
        "loss_dtypes": reported(data, "loss_dtypes"),
        "final_scale": mine[-1]["scale"],
        "reference_final_scale": ref.scales[-1],
        "optimizer_steps": _count(reported(data, "events"), "S"),
        "trajectory_error": float(f"{error:.3e}") if math.isfinite(error) else None,
    }
    # what the page says of it (contracts.verdict; the label in messages.d/amp.yaml)
    metrics |= {"charts": [], "facts": [fact("fact.amp.steps", metrics["optimizer_steps"])]}
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(params, ref, data, mine, flow, on_path=all(e <= tol for e in errors))
    return Evaluation(checks, diagnosis, metrics)


def _trajectory_failed(mine: list, errors: list[float], tol: float) -> Check:
    """Where the weights first leave the reference's path, numbered as a learner counts batches
    (from 1: ``mine[i]`` is read before batch ``i + 1``). Weights that went NaN are said in words
    (a ratio of NaN reads "NaN×"), and a batch the model never ran on is named as such."""
    first = next(i for i, e in enumerate(errors) if not e <= tol)
    batch = first + 1
    end = "_end" if first == len(mine) - 1 else ""  # read after the last batch
    shot = mine[first]
    if shot is None:
        return Check("amp_trajectory", False, "check.amp_trajectory.unseen", {"batch": batch})
    if math.isnan(errors[first]):  # a NaN (or inf) among the weights: reported as null
        nan = sum(1 for v in shot["params"] if v is None or not math.isfinite(v))
        values = {"batch": batch, "nan": nan, "count": len(shot["params"])}
        return Check("amp_trajectory", False, f"check.amp_trajectory.nan{end}", values)
    off = {"batch": batch, "error": Sci(errors[first])}
    return Check("amp_trajectory", False, f"check.amp_trajectory.failed{end}", off)


@dataclass(frozen=True)
class Flow:
    """A gradient that reached the clip or the step at the wrong size."""

    where: str  # "clip" or "step"
    batch: int
    seen: float
    true: float
    scale: float

    @property
    def ratio(self) -> float:
        return self.seen / self.true


def _true_norms(params, mine):
    """The true (unscaled) gradient norm of the learner's weights before every batch, in
    float32: autocast's 16-bit rounding moves it by far less than the FLOW band, and float16
    autocast on a CPU costs a quarter of a second per batch."""
    with SEEDING:
        model, batches, loss_fn = scenarios.amp_batches(params, "cpu")
    weights = list(model.parameters())
    norms = []
    for snapshot, (x, y) in zip(mine, batches, strict=False):
        values = snapshot["params"] if snapshot else None
        if not values or any(v is None for v in values) or len(values) != sum(w.numel() for w in weights):
            norms.append(math.nan)
            continue
        torch.nn.utils.vector_to_parameters(tensors.vector(values).float(), weights)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        norms.append(tensors.norm(torch.cat([w.grad.reshape(-1) for w in weights]).double()))
    return norms


def _flow(params, data, mine):
    """The first clip or step whose gradient was not the true one (scaled, or unscaled twice)."""
    norms = _true_norms(params, mine)
    max_norm = float(params["max_norm"])
    seen: list[tuple[str, int, float | None, float | None, float | None]] = [
        ("clip", c["batch"], c["norm"], c["scale"], 1.0) for c in reported(data, "clips")
    ]
    seen += [("step", s["batch"], s["norm"], None, None) for s in reported(data, "step_norms")]
    for where, batch, norm, scale, _ in seen:
        if not 0 <= batch < len(norms) or norm is None:
            continue
        true = norms[batch]
        if not (math.isfinite(true) and true > 0):
            continue
        if where == "step":  # after a clip to max_norm
            true = true * min(1.0, max_norm / (true + 1e-6))
        if not FLOW[0] <= norm / true <= FLOW[1]:
            if scale is None:
                scale = mine[batch]["scale"] if mine[batch] else math.nan
            return Flow(where, batch, norm, true, scale)
    return None


def _trained_dtypes(data) -> tuple[dict[str, int], int] | None:
    """The linear layers' dtypes in the forwards a backward reached, and how many other
    forwards ran (they only looked: an evaluation, a logged loss, a warm-up pass, in any
    dtype); None when no forward trained or the record stopped (then every forward counts)."""
    snaps = reported(data, "snapshots", [])
    if not isinstance(snaps, list) or len(snaps) >= MAX_SNAPSHOTS:
        return None
    if not any(s.get("trained") is True for s in snaps):
        return None
    counts: dict[str, int] = {}
    for snap in snaps:
        if snap.get("trained") is True:
            for dtype, count in (snap.get("linear") or {}).items():
                counts[dtype] = counts.get(dtype, 0) + count
    return counts, sum(1 for s in snaps if s.get("trained") is not True)


def _linear_dtypes(data) -> tuple[dict[str, int], int]:
    """The linear layers' dtypes the autocast check and diagnosis read, and the forwards left
    out as looks (0 when every forward counts)."""
    trained = _trained_dtypes(data)
    if trained is not None and any(trained[0].values()):
        return trained
    return reported(data, "linear_dtypes"), 0


def _autocast_check(data, wanted):
    """The linear layers ran in ``wanted`` in the forwards the batches trained on (a forward
    that only looks may run in float32: issue 41, red team 5 R4's family), the loss in float32."""
    (linear, looks), losses = _linear_dtypes(data), reported(data, "loss_dtypes")
    low = linear.get(wanted, 0)
    total = sum(linear.values())
    if low != total or not total:
        return Check(
            "autocast",
            False,
            "check.autocast.linear",
            {"count": total - low, "total": total, "dtype": wanted, "seen": ", ".join(sorted(linear))},
        )
    if losses and set(losses) != {"float32"}:
        return Check("autocast", False, "check.autocast.loss", {"seen": ", ".join(sorted(losses))})
    if looks:
        values = {"total": total, "dtype": wanted, "looks": looks}
        return Check("autocast", True, "check.autocast.passed_looks", values)
    return Check("autocast", True, "check.autocast.passed", {"total": total, "dtype": wanted})


# GradScaler's calls, each a sync the supervisor counts (worker/harness/instrument.watch_scaler)
SCALER_CALLS = ("scale", "unscale_", "scaler.step", "update", "update.new_scale")
MAX_EVENTS = 2000  # the harness's record of events stops there (worker/harness/amp.py)


def _scaler_calls(data: dict) -> dict[str, int]:
    """How many times the loop called each of GradScaler's methods, as the supervisor counted
    them; the child's events, where it kept them all, must say the same. ``update.new_scale``: an
    update handed a scale of the loop's own (the scale set by hand, which no right loop does)."""
    seen = observed(data)["counts"]
    counted = {code: int(seen.get(code, 0)) for code in SCALER_CALLS}
    events = reported(data, "events")
    if len(events) < MAX_EVENTS:
        for code in SCALER_CALLS[:3]:
            agree(_count(events, code), counted[code], "scaler")
        agree(_count(events, "update"), counted["update"] + counted["update.new_scale"], "scaler")
    return counted


def _order_check(data, n, flow):
    events = reported(data, "events")
    calls = _scaler_calls(data)
    counts = {
        "scale": calls["scale"],
        "scaler.step": calls["scaler.step"],
        "update": calls["update"],
        "C": _count(events, "C"),
    }
    values = {
        "scales": counts["scale"],
        "steps": counts["scaler.step"],
        "updates": counts["update"],
        "clips": counts["C"],
        "batches": n,
    }
    if calls["update.new_scale"]:  # the scale set by hand: the scaler's own is not followed
        values = {"count": calls["update.new_scale"], "batches": n}
        return Check("scaler_order", False, "check.scaler_order.new_scale", values)
    if any(count != n for count in counts.values()):
        return Check("scaler_order", False, "check.scaler_order.failed", values)
    early = next((c for c in reported(data, "clips") if not c["unscaled"]), None)
    if early is not None:  # the counts are right: the order is not
        key = "clip_early" if _count(events, "unscale_") else "no_unscale"
        values = {**values, "batch": early["batch"] + 1}  # learners count batches from 1
        return Check("scaler_order", False, f"check.scaler_order.{key}", values)
    if flow is not None:
        return Check(
            "scaler_order",
            False,
            f"check.scaler_order.{flow.where}_flow",
            {
                "batch": flow.batch + 1,
                "seen": Sci(flow.seen),
                "true": Sci(flow.true),
                "ratio": Sci(flow.ratio),
            },
        )
    return Check("scaler_order", True, "check.scaler_order.passed", values)


def _overflow_check(params, mine):
    j = int(params["overflow_batch"])  # counted from 0; the texts count from 1
    before, after = mine[j], mine[j + 1]
    if before is None or after is None:
        return Check("overflow", False, "check.overflow.not_seen", {"batch": j + 1})
    changed = before["params"] != after["params"]
    values = {"batch": j + 1, "before": int(before["scale"]), "after": int(after["scale"])}
    if changed:
        return Check("overflow", False, "check.overflow.applied", values)
    if after["scale"] != before["scale"] / 2:
        return Check("overflow", False, "check.overflow.scale", values)
    return Check("overflow", True, "check.overflow.passed", values)


def _scale_check(ref: Reference, mine: list) -> Check:
    """The GradScaler's scale the supervisor read before every batch and after the last (the
    last number of each reading) is the instructor's: the scaler's own update() doubles it after
    each clean step (growth_interval 1) and halves it after a skipped one. A scale that never
    grows, is pinned, or misses an update, whatever the counts of the calls say, is off here."""
    for i, (shot, want) in enumerate(zip(mine, ref.scales, strict=True)):
        if shot is None:
            continue  # a batch never run on: the trajectory's line says so
        if shot["scale"] != want:
            end = "_end" if i == len(mine) - 1 else ""
            values = {"batch": i + 1, "yours": _scale_text(shot["scale"]), "reference": _scale_text(want)}
            return Check("amp_scale", False, f"check.amp_scale.failed{end}", values)
    values = {"first": _scale_text(ref.scales[0]), "last": _scale_text(ref.scales[-1])}
    return Check("amp_scale", True, "check.amp_scale.passed", values)


def _scale_text(value: object) -> str:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)


# ---------------------------------------------------------------- diagnosis


def diagnose(params, ref, data, mine, flow=None, on_path=False):
    """The known mistake the trace shows, or None. ``on_path``: the weights the supervisor read
    before every batch and at the end are the instructor's (the trajectory passed)."""
    events, wanted = reported(data, "events"), params["amp_dtype"]
    linear, _ = _linear_dtypes(data)
    total = sum(linear.values())
    if total and linear.get("float32", 0) == total:
        return Diagnosis("no-autocast", {"total": total, "dtype": wanted})
    if reported(data, "loss_dtypes").get(wanted) and reported(data, "loss_autocast")["off"]:
        return Diagnosis("loss-outside-autocast", {"dtype": wanted})
    scaled, stepped = _count(events, "scale"), _count(events, "scaler.step")
    j = int(params["overflow_batch"])  # counted from 0; the texts count from 1
    if not scaled and not stepped:
        return Diagnosis("no-scaler", {"batch": j + 1, **_overflow_values(mine, j)})
    if not stepped and _count(events, "S"):
        return Diagnosis(
            "step-without-scaler", {"steps": _count(events, "S"), "batch": j + 1, **_overflow_values(mine, j)}
        )
    early = [(i, c) for i, c in enumerate(reported(data, "clips")) if not c["unscaled"]]
    if early and on_path:
        # the clip saw scaled gradients, yet the weights are the instructor's: its threshold
        # grew with the scale (max_norm × scaler.get_scale()), so it cut the right amount; not
        # the order the exercise asks for, and the text claims no wrong cut (red team 5 R5)
        i, clip = early[0]
        batch = clip["batch"] if isinstance(clip["batch"], int) and clip["batch"] >= 0 else i
        return Diagnosis("clip-on-scaled-gradients", {"batch": batch + 1, "scale": int(clip["scale"])})
    if early:
        i, clip = early[0]
        true = ref.clip_norms[i] if i < len(ref.clip_norms) else math.nan
        return Diagnosis(
            "clip-before-unscale",
            {
                "scale": int(clip["scale"]),
                "norm": clip["norm"] if clip["norm"] is not None else math.inf,
                "true_norm": true,
                "max_norm": float(params["max_norm"]),
            },
        )
    if flow is not None and math.isfinite(flow.scale) and FLOW[0] <= flow.ratio * flow.scale <= FLOW[1]:
        # divided by the scale once too often: the gradients never carried it
        return Diagnosis(
            "unscaled-backward",
            {
                "evidence": Phrase(
                    "diagnosis.unscaled-backward.divided",
                    {
                        "where": Phrase(f"flow.{flow.where}"),
                        "batch": flow.batch + 1,
                        "seen": Sci(flow.seen),
                        "true": Sci(flow.true),
                        "scale": int(flow.scale),
                    },
                )
            },
        )
    return None


def _overflow_values(mine, j):
    after = mine[j + 1]["params"] if mine[j + 1] else []
    return {"nan": sum(1 for v in after if v is None), "count": len(after)}


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    """A known mistake behind an exception: GradScaler refuses some wrong orders."""
    message = error.get("message", "")
    events = reported(data or {}, "events", [])
    frames = error.get("traceback") or []
    if "_scale is None" in message and not _count(events, "scale"):
        # unscale_/step need the scale that scaler.scale(loss) sets up
        return Diagnosis(
            "unscaled-backward",
            {
                "evidence": Phrase(
                    "diagnosis.unscaled-backward.raised", {"code": frames[-1]["code"] if frames else ""}
                )
            },
        )
    codes = [e[0] for e in events]
    last_step = max((i for i, c in enumerate(codes) if c == "scaler.step"), default=None)
    if (
        (
            "has already been called since the last update()" in message
            or "is being called after step()" in message
        )
        and last_step is not None
        and "update" not in codes[last_step:]
    ):
        return Diagnosis(
            "update-missing",
            {
                "code": frames[-1]["code"] if frames else "",
                "steps": codes.count("scaler.step"),
                "updates": codes.count("update"),
            },
        )
    if "No inf checks were recorded" in message and not _count(events, "scaler.step"):
        return Diagnosis(
            "step-without-scaler",
            {"steps": _count(events, "S"), "batch": int(params["overflow_batch"]) + 1, "nan": 0, "count": 0},
        )
    return None
