"""Checks of the "phases" kind (lesson 3).

Every fetch, forward, backward and optimizer step must lie inside a ``record_function`` range
named after its phase; each loop must be one pass over the loader (one fetch, forward, backward
and step per batch: a sample of the batches can point at the wrong phase); and on every loop
(each with a different phase made slow on purpose, in an order the sandbox's supervisor drew)
the learner's answer must name the slow phase. The harness's own totals per label back the
answer up: they are the learner's ranges, timed.

What a pass rests on is the supervisor's: the events are its syncs, counted per loop; a range
is the span between its ``open:<phase>`` and ``close:<phase>`` syncs, and an event lies inside
it when the supervisor received it between the two (``_seen``); which phase was slow it drew
itself. The timeline the learner's process reports (its ranges and points, timed by its own
clock) must hold as many events, and otherwise only names the mistake and gives the figures.
"""

import bisect
import itertools
import math

import torch

from worker.checks import Check, Diagnosis, Evaluation, Interfered, agree, observed
from worker.checks.tensors import flat, vector
from worker.harness.phases import scenario

PHASES = ("data", "forward", "backward", "optimizer")


def _clean(ranges, others):
    """Those of ``ranges`` (``[name, start, end]``) that hold none of ``others`` (spans): sorted
    by start, the earliest end among the spans that start at or after a range's start tells."""
    others = sorted(others)
    starts = [o[0] for o in others]
    earliest = [math.inf] * (len(others) + 1)  # earliest[i]: the least end of others[i:]
    for i in range(len(others) - 1, -1, -1):
        earliest[i] = min(others[i][1], earliest[i + 1])
    return [r for r in ranges if earliest[bisect.bisect_left(starts, r[1])] > r[2]]


def _covered(spans, ranges):
    """How many of ``spans`` lie inside one of ``ranges``: sorted by start, the latest end among
    the ranges that start at or before a span's start tells."""
    ranges = sorted((r[1], r[2]) for r in ranges)
    starts = [r[0] for r in ranges]
    latest = list(itertools.accumulate((r[1] for r in ranges), max))
    inside = 0
    for start, end in spans:
        i = bisect.bisect_right(starts, start)
        inside += i > 0 and latest[i - 1] >= end
    return inside


def _coverage(run, own=True):
    """phase → (events inside a range of their phase's own, events); not ``own``: inside any
    range with the phase's name. A range of its own holds none of the other phases' events
    (four ranges around the whole loop label nothing). Sort and sweep: O(n log n) in the
    ranges and events, whatever the trace holds."""
    points = run["points"]
    coverage = {}
    for phase in PHASES:
        named = [r for r in run["ranges"] if r[0] == phase]
        if own:
            named = _clean(named, [o for other in PHASES if other != phase for o in points[other]])
        coverage[phase] = (_covered(points[phase], named), len(points[phase]))
    return coverage


def _seen(events, number):
    """Loop ``number``'s timeline as the supervisor received it (``_coverage``'s shape, its
    position in the supervisor's events for a time): each phase's ranges, an open paired with
    the latest unclosed one of its name, and each fetch, forward, backward and step as an
    instant."""
    ranges: list[list] = []
    points: dict[str, list[tuple[int, int]]] = {phase: [] for phase in PHASES}
    opened: dict[str, list[int]] = {phase: [] for phase in PHASES}
    for at, (label, index, *_) in enumerate(events):
        if index != number:
            continue
        edge, _, name = label.partition(":")
        if label in PHASE_OF:
            points[PHASE_OF[label]].append((at, at))
        elif name in opened and edge == "open":
            opened[name].append(at)
        elif name in opened and edge == "close" and opened[name]:
            ranges.append([name, opened[name].pop(), at])
    return {"ranges": ranges, "points": points}


def _totals(run):
    totals = dict.fromkeys(PHASES, 0.0)
    for name, start, end in run["ranges"]:
        if name in totals:
            totals[name] += end - start
    return totals


def _spent(run, phase):
    return sum(end - start for start, end in run["points"][phase])


LABELS = {"data": "fetch", "forward": "forward", "backward": "backward", "optimizer": "step"}
PHASE_OF = {label: phase for phase, label in LABELS.items()}


def _spans(value, width):
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) == width and all(isinstance(x, int | float) for x in v[width - 2 :])
        for v in value
    )


def _well_formed(run):
    """A run as the harness reports it (``worker/harness/phases.py``): an answer, its ranges
    ``[name, start, end]`` and each phase's points ``[start, end]``."""
    points = run.get("points") if isinstance(run, dict) else None
    return (
        isinstance(points, dict)
        and isinstance(run.get("answer"), str)
        and _spans(run.get("ranges"), 3)
        and all(isinstance(r[0], str) for r in run["ranges"])
        and all(_spans(points.get(phase), 2) for phase in PHASES)
    )


def _observed(params, data):
    """The runs with the phase the supervisor made slow in each (``slow``), after checking that
    the learner's process reported exactly the runs the exercise asked for (one per slow phase:
    a shorter report, none at all included, would pass every check vacuously) and that each
    run's timeline holds as many fetches, forwards, backwards and steps as the supervisor
    counted in it."""
    seen = observed(data)
    slowed = seen.get("slowed") or []
    if sorted(slowed) != sorted(LABELS[p] for p in params["slow"]):
        raise Interfered("missing", detail="the slow phases the supervisor drew are missing")
    runs = data.get("runs")
    agree(len(runs) if isinstance(runs, list) else None, len(slowed), "calls")
    if not all(_well_formed(run) for run in runs):
        raise Interfered("shape", detail="a reported run is not in the harness's shape")
    for number, run in enumerate(runs):
        for phase, label in LABELS.items():
            count = sum(1 for e in seen["events"] if e[0] == label and e[1] == number)
            agree(len(run["points"][phase]), count, "events")
    if seen["events_dropped"]:
        agree(0, seen["events_dropped"], "events")
    return [
        {**run, "slow": PHASE_OF[slowed[n]], "seen": _seen(seen["events"], n)}
        for n, run in enumerate(data["runs"])
    ]


ALIGNED = 0.999  # cosine between an update and the trusted step's fit: a learner's float32 is ~1e-6 off
ROUNDING = 2.0**-22  # and the parameters' own float32 rounding (before and after), relative to their norm
NEVER_ZEROED = 1e-3  # every update carrying the whole one before it (momentum 1): .grad never zeroed
# An update's carried share, times the rate of the update before it over its own (``a`` of each
# fit): SGD's momentum where a schedule turns it on (OneCycleLR: 0.85 to 0.95; the share itself
# follows the learning rate and is ~0 at a schedule's tiny last steps), exactly 1 where the
# gradient of the batch before was still in .grad (issue 41, red team: zero_grad after every
# second step alternated 1 and 0 and passed as momentum). Read on updates the fit explains to
# ``ALIGNED`` (a schedule's last, tiny steps are explained by rounding alone)
CARRIED_WHOLE = 1e-3
STILL = 1e-12  # an update this small (relative to the parameters) moved nothing


def _explained(update, step, previous, scale):
    """Whether ``update`` is ``a * step + b * previous`` with ``a > 0`` (a descent step on this
    batch's gradient, plus momentum's share of the update before it), to a cosine of
    ``ALIGNED`` or within the float32 rounding of parameters of norm ``scale`` (a schedule's
    last, tiny steps); that cosine (0 when the fit points up the gradient); and ``b``, the share
    of the update before it carried into this one (None on a loop's first step); and ``a``, the
    rate of the step on this batch's gradient."""
    basis = torch.stack([step] if previous is None else [step, previous], dim=1)
    coefficients = torch.linalg.lstsq(basis, update.unsqueeze(1)).solution.squeeze(1)
    if float(coefficients[0]) <= 0:
        return False, 0.0, None, 0.0
    fit = basis @ coefficients
    cosine = float(torch.nn.functional.cosine_similarity(update, fit, dim=0))
    carried = None if previous is None else float(coefficients[1])
    right = cosine >= ALIGNED or float((update - fit).norm()) <= ROUNDING * scale
    return right, cosine, carried, float(coefficients[0])


def _trained(params, seen, loops):
    """The ``trained`` check on what the supervisor read after every optimizer step of every
    loop: each update is a step down that batch's gradient at the parameters before it (redone
    here from the seeded model and batches), give or take momentum's share of the update
    before it (a OneCycleLR turns SGD's momentum on). Its size is the loop's business (a
    schedule changes the learning rate); a step that moved nothing, or moved another way, is
    not a training step; nor is one that carries the whole update before it, every time (the
    gradients never zeroed: SGD with a momentum of exactly 1, as far as the parameters tell);
    nor a loop where some update carries the gradient of the batch before whole (zero_grad
    skipped before some steps: momentum carries a share under 1 of it, ``CARRIED_WHOLE``)."""
    model, batches = scenario(params)
    model[2]._sync = lambda *_: None  # the Phase layer: no supervisor here
    start = flat(model.parameters())
    width = start.numel()
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, carried = 0, []
    mixed: dict[str, int] | None = None  # the first loop where some updates carried a gradient whole
    for loop in range(loops):
        whole, rate = 0, None  # updates that carried the gradient before whole; the last fit's rate
        marks = [e for e in seen["events"] if e[0] == "step" and e[1] == loop]
        if any(e[3] < 0 for e in marks):
            raise Interfered("missing", detail="a step without the parameters read")
        before, previous = start, None
        for k, mark in enumerate(marks[: len(batches)]):
            after = vector(seen["snapshots"][mark[3]])[loop * width : (loop + 1) * width]
            update = after - before
            values = {"step": k + 1, "loop": loop + 1}
            if not bool(torch.isfinite(update).all()) or float(update.norm()) <= STILL * float(before.norm()):
                return Check("trained", False, "check.trained.still", values)
            torch.nn.utils.vector_to_parameters(before.float(), model.parameters())
            model.zero_grad()
            x, y = batches[k]
            loss_fn(model(x), y).backward()
            step = -flat(p.grad for p in model.parameters())
            right, alignment, share, own = _explained(update, step, previous, float(after.norm()))
            if share is not None:
                carried.append(share)
                if rate is not None and alignment >= ALIGNED and abs(share * rate / own - 1) <= CARRIED_WHOLE:
                    whole += 1
            rate = own if alignment >= ALIGNED else None
            if not right:
                return Check(
                    "trained", False, "check.trained.failed", {**values, "alignment": round(alignment, 2)}
                )
            before, previous, steps = after, update, steps + 1
        if mixed is None and whole:
            mixed = {"loop": loop + 1, "carried": whole, "steps": len(marks[: len(batches)])}
    if not steps:
        return Check("trained", False, "check.trained.still", {"step": 1, "loop": 1})
    if carried and all(abs(share - 1) < NEVER_ZEROED for share in carried):
        # every update was the one before it plus this batch's step: every gradient so far, summed
        return Check("trained", False, "check.trained.never_zeroed", {"steps": steps})
    if mixed is not None:
        # a gradient carried whole into the next step: the harness's SGD, with or without momentum,
        # never does that; a loop that zeroes .grad before each backward never carries one
        return Check("trained", False, "check.trained.sometimes_zeroed", mixed)
    return Check("trained", True, "check.trained.passed", {"steps": steps})


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    runs = _observed(params, data)
    checks = []
    uncovered = []
    for run in runs:
        for phase, (inside, total) in _coverage(run["seen"]).items():
            if inside < total:
                uncovered.append((phase, inside, total))
    if uncovered:
        phase, inside, total = uncovered[0]
        checks.append(
            Check("labels", False, "check.labels.failed", {"phase": phase, "inside": inside, "total": total})
        )
    else:
        checks.append(Check("labels", True, "check.labels.passed", {"phases": ", ".join(PHASES)}))
    batches = int(params["n_batches"])
    counts = [_counts(run) for run in runs]
    off = next((c for c in counts if set(c.values()) != {batches}), None)
    if off is not None:
        checks.append(Check("one_pass", False, "check.one_pass.failed", {"batches": batches, **off}))
    else:
        checks.append(Check("one_pass", True, "check.one_pass.passed", {"batches": batches}))
    checks.append(_trained(params, observed(data), len(runs)))
    wrong = [run for run in runs if run["answer"] != run["slow"]]
    not_text = next((run for run in runs if run.get("answer_is_text") is False), None)
    if not_text is not None:  # a tuple or a list: not a wrong phase, a wrong kind of answer
        checks.append(Check("answer", False, "check.answer.not_text", {"answer": not_text["answer"]}))
    elif wrong:
        run = wrong[0]
        checks.append(
            Check("answer", False, "check.answer.failed", {"answer": run["answer"], "slow": run["slow"]})
        )
    else:
        checks.append(
            Check(
                "answer",
                True,
                "check.answer.passed",
                {"loops": len(runs), "slow": ", ".join(r["slow"] for r in runs)},
            )
        )
    metrics = {"labelled_ms": [{k: round(v, 1) for k, v in _totals(r).items()} for r in runs]}
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(runs, batches)
    return Evaluation(checks, diagnosis, metrics)


def _counts(run):
    """How many fetches, forwards, backwards and optimizer steps the loop made."""
    return {
        key: len(run["points"][phase])
        for key, phase in (
            ("fetches", "data"),
            ("forwards", "forward"),
            ("backwards", "backward"),
            ("steps", "optimizer"),
        )
    }


def diagnose(runs, batches):
    """The known mistake the timelines show, or None."""
    names = {r[0] for run in runs for r in run["ranges"]}
    missing = [phase for phase in PHASES if phase not in names]
    if missing:
        return Diagnosis(
            "missing-labels", {"missing": ", ".join(missing), "found": ", ".join(sorted(names)) or "—"}
        )
    for run in runs:
        inside, total = _coverage(run, own=False)["data"]
        if inside < total and run["slow"] == "data":
            return Diagnosis(
                "data-outside-label",
                {
                    "outside": total - inside,
                    "total": total,
                    "labelled": round(_totals(run)["data"]),
                    "spent": round(_spent(run, "data")),
                },
            )
    if any(inside < total for run in runs for inside, total in _coverage(run).values()):
        return None
    for counts in map(_counts, runs):
        if set(counts.values()) != {batches}:
            # stopped early (a sample of the batches) is a known mistake; extra passes are not
            if max(counts.values()) <= batches:
                return Diagnosis("partial-pass", {"batches": batches, **counts})
            return None
    if any(run.get("answer_is_text") is False for run in runs):
        return None  # the answer check says what to return; no phase was named wrong
    for run in runs:
        if run["answer"] != run["slow"]:
            totals = _totals(run)
            return Diagnosis(
                "wrong-phase-named",
                {
                    "answer": run["answer"],
                    "slow": run["slow"],
                    "slow_ms": round(totals[run["slow"]]),
                    "answer_ms": round(totals.get(run["answer"], 0.0)),
                },
            )
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
