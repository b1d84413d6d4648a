"""Checks of the "accumulation" kind (docs/architecture.md, "The maths behind the diagnosis").

The reference is the true large batch: for every accumulation cycle, one batch made of
its micro-batches, mean loss (or summed token losses over the cycle's tokens), one
backward, clipping if the exercise clips, one SGD step — float64 on the CPU, built from
the same seeded scenario the harness used. The learner passes when the parameters match
it after every optimizer step, the step count is right and at most one micro-batch's
activations were alive at a time. When something differs, ``.grad`` at every step is
decomposed onto the per-micro-batch unit gradients the harness recorded, and the
coefficients (expected: each micro-batch's share of its cycle) name the mistake.
"""

import json
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from contracts.messages import Phrase, Sci  # noqa: E402
from worker.checks import (  # noqa: E402
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    Interfered,
    agree,
    observed,
    snapshots,
    tensors,
)
from worker.harness import memory, scenarios  # noqa: E402

# traj_err = max_t |θ_t − θ_ref,t| / |θ_ref,t − θ_0|; wrong loops are ≥ 0.14.
# The tolerance follows the dtype a learner can reasonably bring into the scenario's: in a
# float64 run, a float32 factor (`1 / num_tokens` of an int64 count) is ~1e-7 off, so 1e-5;
# in a float32 run, float32 accumulation order, 1e-4.
TOLERANCES = {"float64": 1e-5, "float32": 1e-4}
# what the scenario's own dtype gives a right loop (1e-15 in float64, 1.7e-6 in float32);
# a passing error above it is named as rounding from a lower precision
EXACT = {"float64": 1e-12, "float32": 1e-5}
GPU_FACTOR = 10.0  # nondeterministic kernels on CUDA
MEMORY_FACTOR = 1.1  # peak saved bytes may exceed one micro-batch's by 10 % …
MEMORY_SLACK = 512  # … plus a few scalars (a divisor kept as a tensor, a token count)
IGNORED = 0.02  # a micro-batch whose weight is below 2 % of its share (or of the step's largest
# weight, where that is smaller) did not enter the step
NOISE = 1e-6  # weights below this are rounding noise of the decomposition
CLOSE = 0.01  # weights that agree to 1 % are the same weight
UNEXPLAINED = 0.01  # residual of the decomposition above which the gradient is unexplained
# A right trajectory needs every micro-batch's forward with autograd on, which saves at least
# what the reference's forward of that micro-batch saves; a meter that counted less than half
# of it did not see them (saved under hooks of the learner's own, for instance).
HIDDEN = 0.5
# with no optimizer step observed, parameters further than this share of the reference's first
# update from where they began were moved by something else
MOVED = 0.01
MAX_STEPS = 64  # the harness records the first 64 steps


@dataclass(frozen=True)
class Reference:
    cycles: list  # micro-batch indices of each cycle
    weights: list  # per micro-batch: samples or real tokens
    positions: list  # per micro-batch: loss positions, padding included
    initial: torch.Tensor
    trajectory: list  # parameters after each step
    grads: list  # gradient before clipping at each step
    micro_peak: int  # saved bytes of the largest single micro-batch
    cycle_peak: int  # saved bytes of the first cycle taken as one batch
    saved_total: int  # saved bytes of every micro-batch's forward, added up


def _saved(scenario, batches):
    """The meter over one forward and backward of ``batches`` taken as one batch."""
    params = list(scenario.model.parameters())
    with memory.SavedTensorMeter(params) as meter:
        scenario.batch_loss(scenario.model, batches).backward()
    scenario.model.zero_grad()
    return meter


@lru_cache(maxsize=32)
def _reference(key: str) -> Reference:
    params = json.loads(key)
    scenario = scenarios.build(params, torch.float64)
    model, batches = scenario.model, scenario.micro_batches
    weights = list(model.parameters())
    cycles = scenarios.cycles(len(batches), int(params["accum_steps"]))
    micro = [_saved(scenario, [b]) for b in batches]
    cycle_peak = _saved(scenario, [batches[i] for i in cycles[0]]).peak
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    initial, trajectory, grads = tensors.flat(weights), [], []
    for cycle in cycles:
        optimizer.zero_grad()
        scenario.batch_loss(model, [batches[i] for i in cycle]).backward()
        grads.append(tensors.flat([w.grad for w in weights]))
        if params.get("max_norm") is not None:
            torch.nn.utils.clip_grad_norm_(weights, float(params["max_norm"]))
        optimizer.step()
        trajectory.append(tensors.flat(weights))
    return Reference(
        cycles=cycles,
        weights=[scenario.weight(y) for _, y in batches],
        positions=[scenario.positions(y) for _, y in batches],
        initial=initial,
        trajectory=trajectory,
        grads=grads,
        micro_peak=max(m.peak for m in micro),
        cycle_peak=cycle_peak,
        saved_total=sum(m.packed for m in micro),
    )


def reference(params: dict) -> Reference:
    """The large-batch reference of ``params`` (cached: it depends on nothing else). Built under
    SEEDING: the builders seed torch's global generator, shared by concurrent grades."""
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    reference(params)


def tolerance(params: dict, device: str) -> float:
    tol = float(params.get("tolerance", TOLERANCES.get(params.get("dtype", "float64"), 1e-4)))
    return tol * (GPU_FACTOR if device.startswith("cuda") else 1.0)


# ---------------------------------------------------------------- outcome


def observations(data: dict) -> tuple[list, int, list, dict]:
    """What the supervisor read: the parameters after each step, the number of steps, the final
    parameters and the memory meter's counts (its peak kept by the supervisor). The child's own
    report must say the same, or the run was interfered with."""
    seen = observed(data)
    steps = snapshots(seen, "step")
    taken = int(seen["counts"].get("step", 0))
    meter = (seen["meters"] or [None])[0] or {"peak": 0, "packed": 0}
    agree(data["steps_total"], taken, "steps")
    agree(len(data["steps"]), min(taken, MAX_STEPS), "steps")
    agree([s["params"] for s in data["steps"]], steps[: len(data["steps"])], "parameters")
    agree(data["final_params"], seen["final_params"], "parameters")
    agree(int(data["peak_saved_bytes"]), meter["peak"], "memory")
    return steps, taken, seen["final_params"], meter


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    ref = reference(params)
    seen_steps, taken, seen_final, meter = observations(data)
    steps = [tensors.vector(s) for s in seen_steps]
    expected = len(ref.trajectory)
    final = tensors.vector(seen_final)

    errors, ratios = [], []
    before, ref_before = ref.initial, ref.initial
    for t in range(min(len(steps), expected)):
        travelled = tensors.norm(ref.trajectory[t] - ref.initial)
        errors.append(tensors.norm(steps[t] - ref.trajectory[t]) / travelled)
        ratios.append(tensors.norm(steps[t] - before) / tensors.norm(ref.trajectory[t] - ref_before))
        before, ref_before = steps[t], ref.trajectory[t]
    tol = tolerance(params, device)
    first_bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    final_err = tensors.norm(final - ref.trajectory[-1]) / tensors.norm(ref.trajectory[-1] - ref.initial)

    finite = [r for r in ratios if math.isfinite(r)]
    median = sorted(finite)[len(finite) // 2] if finite else None
    dtype = params.get("dtype", "float64")
    checks = [_steps_check(taken, expected)]
    first_move = tensors.norm(ref.trajectory[0] - ref.initial)
    moved = not tensors.norm(final - ref.initial) <= MOVED * first_move  # NaN moved too
    checks.append(
        _trajectory_check(
            taken, expected, errors, median, first_bad, final_err, tol, EXACT.get(dtype, 0.0), dtype, moved
        )
    )
    if params.get("scaler"):
        checks.append(_scaler_check(params, data, expected))
    # torch's checkpoint saves in the meter's place: fewer bytes are seen where every backward
    # recomputed its forward under it
    recomputed = meter.get("recomputed", 0) >= max(data["backwards"], 1)
    if checks[1].passed and meter["packed"] < HIDDEN * ref.saved_total and not recomputed:
        raise Interfered(
            "hidden",
            {"seen": int(meter["packed"]), "needed": int(ref.saved_total)},
            f"{meter['packed']} bytes saved for backward seen, {ref.saved_total} needed for these parameters",
        )
    peak = int(meter["peak"])
    checks.append(_memory_check(params, ref, data, peak))

    metrics = {
        "optimizer_steps": taken,
        "reference_optimizer_steps": expected,
        "update_ratio": round(median, 4) if median is not None else None,
        "trajectory_error": _round_sci(max(errors + [final_err])) if errors else None,
        "peak_activation_bytes": peak,
        "reference_peak_activation_bytes": ref.micro_peak,
        "large_batch_peak_activation_bytes": ref.cycle_peak,  # the naive loop, for the page
        "forwards": data["forwards"],
        "backwards": data["backwards"],
    }
    if params.get("max_norm") is not None:
        metrics["clip_calls"] = data["clips_total"]
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(params, ref, data, numbers_ok=checks[0].passed and checks[1].passed)
    return Evaluation(checks, diagnosis, metrics)


MAX_LOSSES = 64


def summarize(params: dict, data: dict) -> dict:
    """What a plain run did (no verdict): steps, memory, and the loss on all the exercise's
    data with the parameters at the start and after each step, computed here, not trusted."""
    seen_steps, taken, _, meter = observations(data)
    with SEEDING:
        scenario = scenarios.build(params, torch.float64)
    weights = list(scenario.model.parameters())
    initial = tensors.flat(weights).tolist()
    losses = []
    with torch.no_grad():
        for snapshot in [initial, *seen_steps][:MAX_LOSSES]:
            torch.nn.utils.vector_to_parameters(tensors.vector(snapshot), weights)
            loss = float(scenario.batch_loss(scenario.model, scenario.micro_batches))
            losses.append(round(loss, 6) if math.isfinite(loss) else None)
    return {
        "optimizer_steps": taken,
        "peak_activation_bytes": int(meter["peak"]),
        "forwards": int(data["forwards"]),
        "backwards": int(data["backwards"]),
        "losses": losses,
    }


def _round_sci(x: float) -> float | None:
    return float(f"{x:.3e}") if math.isfinite(x) else None


def _steps_check(taken, expected):
    values = {"steps": taken, "reference_steps": expected}
    if taken == expected:
        return Check("steps", True, "check.steps.passed", values)
    return Check("steps", False, "check.steps.failed", values)


def _trajectory_check(taken, expected, errors, median, first_bad, final_err, tol, exact, dtype, moved=False):
    """``median``: the update size over the large batch's, the median over the steps (the
    figure the verdict's chart shows too); ``moved``: whether the final parameters are not the
    initial ones."""
    if taken == 0:
        # the parameters moved all the same: updated by something other than the optimizer
        # handed in (an optimizer of the loop's own, a manual update), which the grader follows
        message = "check.trajectory.moved_without_step" if moved else "check.trajectory.no_steps"
        return Check("trajectory", False, message, {})
    if first_bad is not None:
        values = {"step": first_bad + 1, "error": Sci(errors[first_bad])}
        if median is None or round(median, 2) == 1.0:  # the size was right, the direction not
            return Check("trajectory", False, "check.trajectory.diverged_direction", values)
        return Check("trajectory", False, "check.trajectory.diverged", {**values, "ratio": median})
    if taken != expected:
        return Check(
            "trajectory", False, "check.trajectory.count", {"steps": taken, "reference_steps": expected}
        )
    if not final_err <= tol:
        return Check("trajectory", False, "check.trajectory.final", {"error": Sci(final_err)})
    error = max(errors)
    if error > exact:
        return Check(
            "trajectory",
            True,
            "check.trajectory.passed_rounding",
            {"error": Sci(error), "tolerance": Sci(tol), "dtype": dtype, "exact": Sci(exact)},
        )
    return Check("trajectory", True, "check.trajectory.passed", {"error": Sci(error)})


# ---------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class StepWeights:
    """How the micro-batches entered one optimizer step of the learner."""

    step: int
    coefficients: dict  # call index → coefficient
    shares: dict  # call index → coefficient / the call's share of its reference cycle
    support: list  # call indices that entered the step
    micro_batches: list  # micro-batch indices that entered the step
    residual: float


def _shares(ref, calls):
    """For each recorded loss call, its share of its reference cycle (n_j / N_cycle)."""
    cycle_of = {i: c for c, cycle in enumerate(ref.cycles) for i in cycle}
    shares: list[float | None] = []
    for call in calls:
        if not call["mbs"]:
            shares.append(None)
            continue
        cycle = ref.cycles[cycle_of[call["mbs"][0]]]
        shares.append(call["n"] / sum(ref.weights[i] for i in cycle))
    return shares


def _gradient_at(data, t):
    """The learner's accumulated gradient at step ``t``: before clipping, if it clipped."""
    clips = [c for c in data["clips"] if c["after_step"] == t]
    if clips and clips[-1]["unscaled"] is not False:
        return tensors.vector(clips[-1]["grad"])
    return tensors.vector(data["steps"][t]["grad"])


def decompose(ref, data):
    """For every learner step: the coefficients of ``.grad`` on the unit gradients."""
    calls = data["calls"]
    shares = _shares(ref, calls)
    units = [tensors.vector(c["unit"]).nan_to_num() for c in calls]
    result = []
    for t in range(len(data["steps"])):
        grad = _gradient_at(data, t).nan_to_num()
        candidates = [i for i, c in enumerate(calls) if c["after_step"] <= t]
        if not candidates:
            result.append(StepWeights(t, {}, {}, [], [], 1.0 if tensors.norm(grad) else 0.0))
            continue
        basis = torch.stack([units[i] for i in candidates], dim=1)
        solution = torch.linalg.lstsq(basis, grad.unsqueeze(1), driver="gelsd").solution[:, 0]
        residual = tensors.norm(basis @ solution - grad) / max(tensors.norm(grad), 1e-300)
        coefficients = dict(zip(candidates, solution.tolist(), strict=True))
        rel = {i: (a / shares[i] if shares[i] else math.nan) for i, a in coefficients.items()}
        # not entered: far below this step's largest weight (a loss divided by far too much
        # leaves every weight small, and all of them in)
        top = max((abs(r) for r in rel.values() if math.isfinite(r)), default=0.0)
        cut = max(IGNORED * min(top, 1.0), NOISE)
        support = [i for i in candidates if not abs(rel[i]) <= cut]
        mbs = sorted({m for i in support for m in calls[i]["mbs"]})
        result.append(StepWeights(t, coefficients, rel, support, mbs, residual))
    return result


def _count(events, code):
    return sum(1 for e in events if e[0] == code)


def _same(values, target=None):
    """Whether all ``values`` agree (with ``target`` when given) within CLOSE."""
    if not values:
        return False
    centre = target if target is not None else sum(values) / len(values)
    return all(abs(v - centre) <= CLOSE * max(abs(centre), 1e-12) for v in values)


def diagnose(params, ref, data, numbers_ok):
    """The known mistake the trace shows, or None."""
    k = int(params["accum_steps"])
    if numbers_ok:
        return _memory_mistake(params, ref, data)
    for rule in (_clip_and_scaler_order, _steps_per_micro_batch):
        found = rule(params, ref, data)
        if found is not None:
            return found
    weights = decompose(ref, data)
    if not weights or any(w.residual > UNEXPLAINED for w in weights):
        return None
    calls = data["calls"]
    supports = [set(w.support) for w in weights]
    if not all(supports):  # a step with an empty gradient: no known mistake does that
        return None

    # only the last micro-batch of each step survived: zeroed on every micro-batch
    windows = [[i for i, c in enumerate(calls) if c["after_step"] == w.step] for w in weights]
    if all(
        len(w.support) == 1 and win and w.support[0] == win[-1]
        for w, win in zip(weights, windows, strict=True)
    ) and any(len(win) > 1 for win in windows):
        w = next(w for w, win in zip(weights, windows, strict=True) if len(win) > 1)
        return Diagnosis(
            "zero-grad-every-micro-batch",
            {
                "step": w.step + 1,
                "kept": calls[w.support[0]]["mbs"][0] + 1,
                "lost": len(windows[w.step]) - 1,
                "share": w.shares[w.support[0]],
            },
        )

    # a micro-batch counted in two steps: gradients leaked from cycle to cycle
    for t, support in enumerate(supports):
        stale = set().union(*supports[:t]) & support if t else set()
        if stale:
            return Diagnosis(
                "never-zero-grad", {"step": t + 1, "stale": len({m for i in stale for m in calls[i]["mbs"]})}
            )

    got = [w.micro_batches for w in weights]
    taken, expected = data["steps_total"], len(ref.cycles)
    short_last = len(ref.cycles[-1]) < k
    if got != ref.cycles[: len(got)]:
        return Diagnosis(
            "wrong-boundary",
            {
                "got": [len(g) for g in got],
                "expected": [len(c) for c in ref.cycles[: len(got)]],
                "step": next(t for t, g in enumerate(got) if g != ref.cycles[t]) + 1,
            },
        )
    scale = _scale_mistake(params, ref, data, weights)
    if scale is not None:
        return scale
    if taken == expected - 1 and short_last:
        return Diagnosis(
            "remainder-dropped", {"left": len(ref.cycles[-1]), "steps": taken, "reference_steps": expected}
        )
    return None


def _scale_mistake(params, ref, data, weights):
    k = int(params["accum_steps"])
    calls = data["calls"]
    full = [w for w in weights if len(ref.cycles[w.step]) == k]
    for w in full:
        shares = [w.shares[i] for i in w.support]
        coefficients = [w.coefficients[i] for i in w.support]
        if _same(shares, 1.0):
            continue
        cycle = ref.cycles[w.step]
        tokens = sum(ref.weights[i] for i in cycle)
        if params.get("scenario") == "tokens":
            counts = [calls[i]["n"] for i in w.support]
            if _same(coefficients) and not _same(counts):
                light, heavy = max(counts), min(counts)
                return Diagnosis(
                    "token-mean-of-means",
                    {"few": heavy, "many": light, "times": light / heavy, "tokens": tokens},
                )
            positions = sum(ref.positions[i] for i in cycle)
            if _same(shares, tokens / positions):
                return Diagnosis(
                    "token-padding-counted", {"ratio": shares[0], "positions": positions, "tokens": tokens}
                )
            if not _same(shares):
                return None
            # summed token losses over a wrong count: by nothing, by accum_steps, …
            ratio = sum(shares) / len(shares)
            divisor = tokens / ratio
            divided = (
                Phrase("token.not_divided")
                if _same([divisor], 1.0)
                else Phrase("token.divided_by", {"divisor": Sci(divisor)})
            )
            return Diagnosis(
                "token-sum-not-normalised", {"ratio": ratio, "tokens": tokens, "divided": divided}
            )
        if not _same(shares):
            return None
        ratio = sum(shares) / len(shares)
        if _same([ratio], float(k)):
            return Diagnosis(
                "loss-not-scaled", {"ratio": ratio, "k": k, "coefficient": coefficients[0], "share": 1 / k}
            )
        return Diagnosis("wrong-scale", {"ratio": ratio, "k": k, "divisor": k / ratio})
    for w in weights:
        size = len(ref.cycles[w.step])
        shares = [w.shares[i] for i in w.support]
        if size < k and _same(shares) and not _same(shares, 1.0):
            ratio = sum(shares) / len(shares)
            return Diagnosis(
                "remainder-wrong-scale", {"left": size, "ratio": ratio, "divisor": size / ratio, "k": k}
            )
    return None


def _memory_check(params, ref, data, peak):
    """One micro-batch's activations at a time: the peak the meter kept, and no forward with
    gradients on over more rows than a micro-batch (under torch's checkpoint the meter sees
    little of it, but its backward recomputes all those rows at once)."""
    limit = MEMORY_FACTOR * ref.micro_peak + MEMORY_SLACK
    values = {"peak": peak, "reference": ref.micro_peak, "times": peak / ref.micro_peak}
    if peak > limit:
        return Check("memory", False, "check.memory.failed", values)
    micro = int(params["micro_batch"])
    largest = max((e[1] for e in data["events"] if e[0] == "F" and e[3:4] != [False]), default=0)
    if largest > micro:
        return Check("memory", False, "check.memory.rows", {**values, "size": largest, "micro": micro})
    return Check("memory", True, "check.memory.passed", values)


def _scaler_check(params, data, expected):
    """The GradScaler in use: every backward on a scaled loss, and each update through
    ``unscale_`` (when clipping), ``scaler.step`` and ``update`` once. In float64 a loop without
    the scaler lands on the same weights: only the calls tell that it was left out."""
    events = data["events"]
    values = {
        "scales": _count(events, "scale"),
        "backwards": data["backwards"],
        "unscales": _count(events, "unscale_"),
        "scaler_steps": _count(events, "scaler.step"),
        "updates": _count(events, "update"),
        "steps": expected,
    }
    unscales_needed = expected if params.get("max_norm") is not None else values["unscales"]
    used = (
        values["scales"] == values["backwards"] > 0
        and values["unscales"] == unscales_needed
        and values["scaler_steps"] == values["updates"] == expected
    )
    early = next((c for c in data["clips"] if c["unscaled"] is False), None)
    scaled = values["scales"] == values["backwards"] > 0
    rest = scaled and values["scaler_steps"] == values["updates"] == expected
    if early is not None and rest and values["unscales"] in (0, unscales_needed):  # the order is wrong
        values["step"] = early["after_step"] + 1
        key = "clip_early" if values["unscales"] else "no_unscale"
        return Check("scaler_use", False, f"check.scaler_use.{key}", values)
    return Check("scaler_use", used, f"check.scaler_use.{'passed' if used else 'failed'}", values)


def _clip_and_scaler_order(params, ref, data):
    events = data["events"]
    if params.get("max_norm") is not None and data["clips_total"] == 0 and data["steps_total"]:
        return Diagnosis("clip-missing", {"steps": data["steps_total"], "max_norm": params["max_norm"]})
    if params.get("max_norm") is not None:
        per_step: dict[int, int] = {}
        for clip in data["clips"]:
            per_step[clip["after_step"]] = per_step.get(clip["after_step"], 0) + 1
        if per_step and max(per_step.values()) > 1:
            return Diagnosis(
                "clip-every-micro-batch", {"clips": data["clips_total"], "steps": data["steps_total"]}
            )
        early = [c for c in data["clips"] if c["unscaled"] is False]
        if early:
            seen = tensors.norm(tensors.vector(early[0]["grad"]).nan_to_num())
            t = early[0]["after_step"]
            true = tensors.norm(ref.grads[t]) if t < len(ref.grads) else math.nan
            return Diagnosis(
                "clip-before-unscale",
                {"scale": _scale_before(data, early[0]), "norm": seen, "true_norm": true},
            )
    if params.get("scaler"):
        updates, steps = _count(events, "update"), _count(events, "scaler.step")
        if updates > steps:
            return Diagnosis("scaler-update-every-micro-batch", {"updates": updates, "steps": steps})
        first = next((c for c in data["clips"] if c["after_step"] == 0 and c["unscaled"]), None)
        scale = data["steps"][0]["scale"] if data["steps"] else None
        if first is not None and scale:
            # before the first step the weights are the reference's: its gradient is the true one
            seen, true = tensors.norm(tensors.vector(first["grad"]).nan_to_num()), tensors.norm(ref.grads[0])
            if 0.5 <= seen / true * scale <= 2.0:  # divided by the scale it never carried
                return Diagnosis(
                    "unscaled-backward",
                    {
                        "evidence": Phrase(
                            "diagnosis.unscaled-backward.divided_step",
                            {"scale": int(scale), "seen": Sci(seen), "true": Sci(true)},
                        )
                    },
                )
    return None


def _scale_before(data, clip):
    scales = [s["scale"] for s in data["steps"] if s["scale"] is not None]
    scale = scales[0] if scales else data.get("final_scale")
    return int(scale) if scale is not None else 0


def _steps_per_micro_batch(params, ref, data):
    taken, expected = data["steps_total"], len(ref.cycles)
    micro = len(ref.weights)
    if taken > expected and taken >= 0.75 * micro:
        return Diagnosis(
            "step-every-micro-batch",
            {
                "steps": taken,
                "micro_batches": micro,
                "reference_steps": expected,
                "k": int(params["accum_steps"]),
            },
        )
    return None


def _memory_mistake(params, ref, data):
    peak = int(data["peak_saved_bytes"])
    values = {
        "peak": peak,
        "reference": ref.micro_peak,
        "times": peak / ref.micro_peak,
        "forwards": data["forwards"],
        "backwards": data["backwards"],
    }
    largest = max((e[1] for e in data["events"] if e[0] == "F"), default=0)
    micro = int(params["micro_batch"])
    if largest > micro:
        return Diagnosis("micro-batches-concatenated", {**values, "size": largest, "micro": micro})
    if data["backwards"] < data["forwards"]:
        return Diagnosis("backward-once-per-cycle", values)
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    """A known mistake behind an exception (GradScaler refuses some wrong orders)."""
    if params.get("scaler") and "No inf checks were recorded" in error.get("message", ""):
        events = (data or {}).get("events", [])
        return Diagnosis(
            "scaler-update-every-micro-batch",
            {"updates": _count(events, "update"), "steps": _count(events, "scaler.step")},
        )
    return None
