"""The accumulation kind's diagnosis (docs/architecture.md, "Accumulation: gradient
decomposition"): each optimizer step's ``.grad`` decomposed onto the per-micro-batch unit
gradients (computed here, at the parameters the supervisor read), the coefficients against
each micro-batch's share of its cycle, and the rules that name the mistake from them; also the
memory and scaler checks the outcome reports. ``accumulation`` builds the reference and judges
the outcome."""

import math
from dataclasses import dataclass

import torch

from contracts.messages import Phrase, Sci  # noqa: E402
from worker.checks import (  # noqa: E402
    SEEDING,
    Check,
    Diagnosis,
    agree,
    observed,
    snapshots,
    tensors,
)
from worker.harness import scenarios  # noqa: E402
from worker.harness.protocol import reported  # noqa: E402

MEMORY_FACTOR = 1.1  # peak saved bytes may exceed one micro-batch's by 10 % …
MEMORY_SLACK = 512  # … plus a few scalars (a divisor kept as a tensor, a token count)
IGNORED = 0.02  # a micro-batch whose weight is below 2 % of its share (or of the step's largest
# weight, where that is smaller) did not enter the step
NOISE = 1e-7  # weights below this are rounding noise of the decomposition (a loss divided by every
# sample the loader holds, 1.92 million on micro-batches of 160,000, leaves shares of 5.2e-7)
CLOSE = 0.01  # weights that agree to 1 % are the same weight
UNEXPLAINED = 0.01  # residual of the decomposition above which the gradient is unexplained
# the micro-batches whose unit gradients one diagnosis may compute (each a forward and a backward
# of 160,000 samples, ~0.1 s): a failing loop of the course needs one per micro-batch (12-15),
# a micro-batch concatenated with its cycle's once per cycle; past it the mistake is not named
MAX_UNIT_BATCHES = 48


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
    clips = [c for c in reported(data, "clips") if c["after_step"] == t]
    if clips and clips[-1]["unscaled"] is not False:
        return tensors.vector(clips[-1]["grad"])
    return tensors.vector(reported(data, "steps")[t]["grad"])


def unit_gradient(scenario, mbs, at):
    """The gradient of micro-batches ``mbs``' own mean loss, taken as one batch, at the
    parameters ``at`` (a cycle's: the large batch's gradient there)."""
    model = scenario.model
    weights = list(model.parameters())
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(at, weights)
    model.zero_grad(set_to_none=True)
    scenario.batch_loss(model, [scenario.micro_batches[i] for i in mbs]).backward()
    return tensors.flat([w.grad if w.grad is not None else torch.zeros_like(w) for w in weights])


def units(params, ref, data, calls):
    """Each loss call's unit gradient: for a call on the scenario's micro-batches, computed here
    at the parameters the supervisor read before it (after its step ``after_step``); for one
    on targets of the loop's own, what the harness computed on the learner's graph. None where
    a call follows a step the supervisor did not read, or past ``MAX_UNIT_BATCHES``."""
    size = ref.initial.numel()
    starts = [ref.initial] + [tensors.vector(s)[:size] for s in snapshots(observed(data), "step")]
    found, done, scenario, budget = [], {}, None, MAX_UNIT_BATCHES
    for call in calls:
        if call["unit"] is not None:  # the learner's process's own figure: it only names
            unit = tensors.vector(call["unit"]).nan_to_num()
            if unit.numel() != size:
                return None
            found.append(unit)
            continue
        key = (tuple(call["mbs"]), call["after_step"])
        if key not in done:
            known = all(0 <= m < len(ref.weights) for m in call["mbs"])  # the child's list
            if not known or not 0 <= call["after_step"] < len(starts) or len(call["mbs"]) > budget:
                return None
            budget -= len(call["mbs"])
            if scenario is None:
                with SEEDING:
                    scenario = scenarios.build(params, torch.float64)
            done[key] = unit_gradient(scenario, call["mbs"], starts[call["after_step"]]).nan_to_num()
        found.append(done[key])
    return found


def decompose(params, ref, data):
    """For every learner step: the coefficients of ``.grad`` on the unit gradients (None where
    they could not be had)."""
    calls = reported(data, "calls")
    found = units(params, ref, data, calls)
    if found is None:
        return None
    shares = _shares(ref, calls)
    result = []
    for t in range(len(reported(data, "steps"))):
        grad = _gradient_at(data, t).nan_to_num()
        candidates = [i for i, c in enumerate(calls) if c["after_step"] <= t]
        if not candidates:
            result.append(StepWeights(t, {}, {}, [], [], 1.0 if tensors.norm(grad) else 0.0))
            continue
        basis = torch.stack([found[i] for i in candidates], dim=1)
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


def diagnose(params, ref, data, numbers_ok, blind=False, kernel=None):
    """The known mistake the trace shows, or None. ``blind``: the saved-tensor meter did not see
    the forwards (a torch.func transform, a thread of the loop's own), where the kernel's count
    grades memory: it has no figure to name a memory mistake by. ``kernel``: that count's check,
    whose figure a memory mistake's explanation quotes (the meter's is the program's word)."""
    k = int(params["accum_steps"])
    if numbers_ok:
        return None if blind else _memory_mistake(params, ref, data, kernel)
    for rule in (_clip_and_scaler_order, _steps_per_micro_batch):
        found = rule(params, ref, data)
        if found is not None:
            return found
    weights = decompose(params, ref, data)
    if not weights or any(w.residual > UNEXPLAINED for w in weights):
        return None
    calls = reported(data, "calls")
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
    taken, expected = reported(data, "steps_total"), len(ref.cycles)
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
    calls = reported(data, "calls")
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
            left = len(ref.cycles[-1])  # a short last cycle (remainder) is divided by what it holds
            divisor = k if left == k else Phrase("divide.short_cycle", {"k": k, "left": left})
            return Diagnosis(
                "loss-not-scaled",
                {"ratio": ratio, "k": divisor, "coefficient": coefficients[0], "share": 1 / k},
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


def memory_check(params, ref, data, peak):
    """One micro-batch's activations at a time: the peak the meter kept, and no forward with
    gradients on over more rows than a micro-batch (under torch's checkpoint the meter sees
    little of it, but its backward recomputes all those rows at once)."""
    limit = MEMORY_FACTOR * ref.micro_peak + MEMORY_SLACK
    values = {"peak": peak, "reference": ref.micro_peak, "times": peak / ref.micro_peak}
    if peak > limit:
        return Check("memory", False, "check.memory.failed", values)
    micro = int(params["micro_batch"])
    largest = max((e[1] for e in reported(data, "events") if e[0] == "F" and e[3:4] != [False]), default=0)
    if largest > micro:
        return Check("memory", False, "check.memory.rows", {**values, "size": largest, "micro": micro})
    return Check("memory", True, "check.memory.passed", values)


# GradScaler's calls, each a sync the supervisor counts (worker/harness/instrument.watch_scaler)
SCALER_CALLS = ("scale", "unscale_", "scaler.step", "update", "update.new_scale")


def scaler_calls(data):
    """How many times the loop called each of GradScaler's methods in the maths run, as the
    supervisor counted them; the child's events, where it kept them all, must say the same.
    ``update.new_scale``: an update handed a scale of the loop's own (not an update of the
    scaler's own: no right loop sets the scale by hand)."""
    counts = observed(data)["counts"]
    counted = {code: int(counts.get(code, 0)) for code in SCALER_CALLS}
    if not reported(data, "events_dropped"):
        events = reported(data, "events")
        for code in SCALER_CALLS[:3]:
            agree(_count(events, code), counted[code], "scaler")
        agree(_count(events, "update"), counted["update"] + counted["update.new_scale"], "scaler")
    return counted


def scaler_check(params, data, expected):
    """The GradScaler in use: every backward on a scaled loss, and each update through
    ``unscale_`` (when clipping), ``scaler.step`` and ``update`` once. In float64 a loop without
    the scaler lands on the same weights: only the calls tell that it was left out, and those
    the supervisor counts (each call a sync); the backwards are the child's count (a program
    that says fewer only fails itself: a scale per backward is asked)."""
    calls = scaler_calls(data)
    values = {
        "scales": calls["scale"],
        "backwards": reported(data, "backwards"),
        "unscales": calls["unscale_"],
        "scaler_steps": calls["scaler.step"],
        "updates": calls["update"],
        "steps": expected,
    }
    unscales_needed = expected if params.get("max_norm") is not None else values["unscales"]
    used = (
        values["scales"] == values["backwards"] > 0
        and values["unscales"] == unscales_needed
        and values["scaler_steps"] == values["updates"] == expected
    )
    early = next((c for c in reported(data, "clips") if c["unscaled"] is False), None)
    scaled = values["scales"] == values["backwards"] > 0
    rest = scaled and values["scaler_steps"] == values["updates"] == expected
    if early is not None and rest and values["unscales"] in (0, unscales_needed):  # the order is wrong
        values["step"] = early["after_step"] + 1
        key = "clip_early" if values["unscales"] else "no_unscale"
        return Check("scaler_use", False, f"check.scaler_use.{key}", values)
    return Check("scaler_use", used, f"check.scaler_use.{'passed' if used else 'failed'}", values)


def _clip_and_scaler_order(params, ref, data):
    events = reported(data, "events")
    if (
        params.get("max_norm") is not None
        and reported(data, "clips_total") == 0
        and reported(data, "steps_total")
    ):
        return Diagnosis(
            "clip-missing", {"steps": reported(data, "steps_total"), "max_norm": params["max_norm"]}
        )
    if params.get("max_norm") is not None:
        per_step: dict[int, int] = {}
        for clip in reported(data, "clips"):
            per_step[clip["after_step"]] = per_step.get(clip["after_step"], 0) + 1
        if per_step and max(per_step.values()) > 1:
            return Diagnosis(
                "clip-every-micro-batch",
                {"clips": reported(data, "clips_total"), "steps": reported(data, "steps_total")},
            )
        early = [c for c in reported(data, "clips") if c["unscaled"] is False]
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
        first = next((c for c in reported(data, "clips") if c["after_step"] == 0 and c["unscaled"]), None)
        scale = reported(data, "steps")[0]["scale"] if reported(data, "steps") else None
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
    scales = [s["scale"] for s in reported(data, "steps") if s["scale"] is not None]
    scale = scales[0] if scales else reported(data, "final_scale")
    return int(scale) if scale is not None else 0


def _steps_per_micro_batch(params, ref, data):
    taken, expected = reported(data, "steps_total"), len(ref.cycles)
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


def _memory_mistake(params, ref, data, kernel=None):
    """Which memory mistake the program's own events show (they only name it), quoting the
    kernel's count of the process where there is one: the rise over the call against what one
    micro-batch saves for backward (the saved-tensor meter runs in the program, which can
    silence it: it read 0 B for a red team's whole cycle alive)."""
    peak: Phrase | int
    if kernel is not None:
        rise = int(kernel.values["rise"])
        peak = Phrase("diagnosis.memory.counted", {"rise": rise})
        reference, times = int(kernel.values["micro_saved"]), rise / kernel.values["micro_saved"]
    else:
        peak = int(reported(data, "peak_saved_bytes"))
        reference, times = ref.micro_peak, peak / ref.micro_peak
    values = {
        "peak": peak,
        "reference": reference,
        "times": times,
        "forwards": reported(data, "forwards"),
        "backwards": reported(data, "backwards"),
    }
    largest = max((e[1] for e in reported(data, "events") if e[0] == "F"), default=0)
    micro = int(params["micro_batch"])
    if largest > micro:
        return Diagnosis("micro-batches-concatenated", {**values, "size": largest, "micro": micro})
    if reported(data, "backwards") < reported(data, "forwards"):
        return Diagnosis("backward-once-per-cycle", values)
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    """A known mistake behind an exception (GradScaler refuses some wrong orders)."""
    message = error.get("message", "")
    if params.get("scaler") and "unscale_() has already been called on this optimizer" in message:
        # a second unscale_ before update(): called on every micro-batch (or twice a cycle)
        return Diagnosis("unscale-every-micro-batch", {"k": int(params["accum_steps"])})
    if params.get("scaler") and "No inf checks were recorded" in message:
        events = reported(data or {}, "events", [])
        return Diagnosis(
            "scaler-update-every-micro-batch",
            {"updates": _count(events, "update"), "steps": _count(events, "scaler.step")},
        )
    return None
