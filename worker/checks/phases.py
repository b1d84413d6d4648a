"""Checks of the "phases" kind (lesson 3).

Every fetch, forward, backward and optimizer step the harness timed must lie inside a
``record_function`` range named after its phase; each loop must be one pass over the loader
(one fetch, forward, backward and step per batch: a sample of the batches can point at the
wrong phase); and on every loop (each with a different phase made slow on purpose, in an order
the sandbox's supervisor drew) the learner's answer must name the slow phase. The harness's own
totals per label back the answer up: they are the learner's ranges, timed.
"""

from worker.checks import Check, Diagnosis, Evaluation, Interfered, agree, observed

PHASES = ("data", "forward", "backward", "optimizer")


def _within(span, r):
    return r[1] <= span[0] and span[1] <= r[2]


def _inside(span, ranges, name, others):
    """Whether ``span`` lies in a range named ``name`` that holds none of ``others`` (the other
    phases' events): four ranges around the whole loop label nothing."""
    return any(r[0] == name and _within(span, r) and not any(_within(o, r) for o in others) for r in ranges)


def _coverage(run, own=True):
    """phase → (events inside a range of their phase's own, events); not ``own``: inside any
    range with the phase's name."""
    points = run["points"]
    coverage = {}
    for phase in PHASES:
        others = [o for other in PHASES if other != phase for o in points[other]] if own else []
        inside = sum(_inside(s, run["ranges"], phase, others) for s in points[phase])
        coverage[phase] = (inside, len(points[phase]))
    return coverage


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


def _observed(params, data):
    """The runs with the phase the supervisor made slow in each (``slow``), after checking that
    the timeline the learner's process reported holds as many fetches, forwards, backwards and
    steps as the supervisor counted in each run."""
    seen = observed(data)
    slowed = seen.get("slowed") or []
    if sorted(slowed) != sorted(LABELS[p] for p in params["slow"]) or len(data["runs"]) > len(slowed):
        raise Interfered("the slow phases the supervisor drew are missing")
    for number, run in enumerate(data["runs"]):
        for phase, label in LABELS.items():
            count = sum(1 for e in seen["events"] if e[0] == label and e[1] == number)
            agree(len(run["points"][phase]), count, f"{phase} events")
    if seen["events_dropped"]:
        agree(0, seen["events_dropped"], "events")
    return [{**run, "slow": PHASE_OF[slowed[n]]} for n, run in enumerate(data["runs"])]


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    runs = _observed(params, data)
    checks = []
    uncovered = []
    for run in runs:
        for phase, (inside, total) in _coverage(run).items():
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
    wrong = [run for run in runs if run["answer"] != run["slow"]]
    if wrong:
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
