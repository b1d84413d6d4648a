"""Checks of the "gputrace" kind (lesson 3): the GPU's method, practised on profiler traces.

Each run, the learner's ``read_trace`` got one trace of a loop whose bottleneck is known by
construction (the lesson's ``traces/traces.json`` says which), changed as
``worker/harness/gputrace.py``'s ``perturb`` changes it under a seed the sandbox's supervisor
drew after the fork. Here every run's trace is made again from those seeds and the lesson's
trace files, and the truth is computed from it:

- the traced span: from the first event's start to the last one's end, whatever its category;
- busy: the share of that span covered by the union of the device's intervals (kernels,
  copies, memsets; two streams at once count once);
- idle: the longest stretch of the span that no device interval covers, in ms, edges included.

The answer must hold on every run: busy within ``BUSY_TOLERANCE``, idle within
``IDLE_TOLERANCE``, and the bottleneck named as ``traces.json`` names it. The classic wrong
methods give other numbers, computed here from the same trace to name the mistake: the host's
labels ranked (``host-labels``), device time summed without merging overlaps
(``summed-overlaps``), the GPU twins of the ranges counted as busy time
(``annotations-as-busy``), the copies left out (``memcpy-ignored``).
"""

import functools
import json
import math
from pathlib import Path
from typing import Any

from contracts.messages import Phrase
from worker.checks import Check, Diagnosis, Evaluation, Interfered, agree, observed
from worker.harness import gputrace as served

DEVICE = served.DEVICE
PHASES = ("data", "forward", "backward", "optimizer")
BOTTLENECKS = ("input", "compute", "launch")
# the course shipped beside the grader (the checks import nothing of the app's settings): a
# deployment with a lessons folder of its own still grades on these files, and a trace served
# from other ones is refused by digest, never judged
LESSONS = Path(__file__).resolve().parents[2] / "lessons"
# the host-label reading: the largest range says where the time went
HOST_READING = {"data": "input", "forward": "compute", "backward": "compute", "optimizer": "compute"}


def within_busy(reported: float, truth: float) -> bool:
    """Half a percentage point, plus 2 % of the share."""
    return abs(reported - truth) <= 0.005 + 0.02 * truth


def within_idle(reported: float, truth: float) -> bool:
    """10 µs, plus 2 % of the stretch."""
    return abs(reported - truth) <= 0.01 + 0.02 * truth


# ---------------------------------------------------------------- reading a trace


def _events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in served.KEEP]


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def span(trace: dict[str, Any]) -> tuple[float, float]:
    events = _events(trace)
    return min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)


def measure(trace: dict[str, Any], cats: tuple[str, ...] = DEVICE) -> dict[str, float]:
    """Busy share and longest idle stretch (ms) of the traced span, the device being the union
    of the events of ``cats``."""
    start, end = span(trace)
    spans = _merged([(e["ts"], e["ts"] + e["dur"]) for e in _events(trace) if e["cat"] in cats])
    busy, idle, cursor = 0.0, 0.0, start
    for a, b in spans:
        a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        idle = max(idle, a - cursor)
        busy += b - a
        cursor = max(cursor, b)
    idle = max(idle, end - cursor)
    return {"busy": busy / (end - start), "idle_ms": idle / 1000, "span_ms": (end - start) / 1000}


def inner(trace: dict[str, Any]) -> dict[str, float]:
    """The reading that leaves the span's idle edges out: busy over the stretch from the GPU's
    first work to its last, and the longest gap between its works."""
    device = [e for e in _events(trace) if e["cat"] in DEVICE]
    first, last = min(e["ts"] for e in device), max(e["ts"] + e["dur"] for e in device)
    clipped = {"traceEvents": device}
    return measure(clipped) if last > first else {"busy": 0.0, "idle_ms": 0.0, "span_ms": 0.0}


def summed(trace: dict[str, Any]) -> float:
    """The device's durations added up, overlaps and all, over the span."""
    start, end = span(trace)
    return sum(e["dur"] for e in _events(trace) if e["cat"] in DEVICE) / (end - start)


def host_labels(trace: dict[str, Any]) -> dict[str, float]:
    """ms inside each host range (``user_annotation``) but the profiler's steps, over the trace:
    the four phases always, and any other range a loop has (the checkpoint's)."""
    totals = dict.fromkeys(PHASES, 0.0)
    for e in _events(trace):
        if e["cat"] == "user_annotation" and not e["name"].startswith("ProfilerStep#"):
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"] / 1000
    return totals


# ---------------------------------------------------------------- the lesson's traces


@functools.lru_cache(maxsize=4)
def _load(folder: str, stamp: tuple[float, ...]) -> tuple[list[dict[str, Any]], list[str], str]:
    root = Path(folder)
    meta = json.loads((root / "traces.json").read_text(encoding="utf-8"))
    loops = meta["loops"]
    if sorted(loops) != sorted(served.LOOPS):
        raise ValueError(f"{root / 'traces.json'}: loops {sorted(loops)}, expected {list(served.LOOPS)}")
    bases = [json.loads((root / loops[name]["trace"]).read_text(encoding="utf-8")) for name in served.LOOPS]
    labels = [loops[name]["bottleneck"] for name in served.LOOPS]
    return bases, labels, str(meta.get("source", "recorded"))


def load(params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], str]:
    """The base traces, their bottlenecks and where the lesson's came from ("modelled" or
    "recorded"): the lesson's files under ``params["traces"]`` (in ``LOOPS`` order), then the
    queue model's loops where memsets and the span's idle edges matter (``served.EXTRA``)."""
    root = LESSONS / str(params["traces"])
    stamp = tuple(p.stat().st_mtime for p in sorted(root.glob("*.json")))
    return _with_extra(str(root), stamp)


@functools.lru_cache(maxsize=4)
def _with_extra(folder: str, stamp: tuple[float, ...]) -> tuple[list[dict[str, Any]], list[str], str]:
    bases, labels, source = _load(folder, stamp)
    return [*bases, *served.extra_bases()], [*labels, *served.EXTRA.values()], source


def job_inputs(params: dict[str, Any]) -> dict[str, Any]:
    """What the harness needs beside the exercise's parameters and cannot read in the sandbox:
    the base traces (never their bottlenecks), sent with the job as ``params["bases"]``."""
    return {"bases": load(params)[0]}


def runs_count(params: dict[str, Any]) -> int:
    return min((len(served.LOOPS) + len(served.EXTRA)) * int(params.get("rounds", 1)), served.MAX_RUNS)


# ---------------------------------------------------------------- judging


def _bases(params: dict[str, Any], data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], str]:
    """The traces the supervisor fed (known by their digests: the lesson's files), their
    bottlenecks and source. Any other traces: ours to fix, never judged."""
    bases, labels, source = load(params)
    if data.get("bases") == [served.digest(base) for base in bases]:
        return bases, labels, source
    raise RuntimeError("the traces the sandbox served are not the lesson's trace files")


def _truths(params: dict[str, Any], data: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Every run's trace, made again from the seeds the supervisor drew, and its truth; and
    where the traces came from."""
    seen = observed(data)
    bases, labels, source = _bases(params, data)
    items = seen.get("items") or {}
    seeds = [int(s) for s in items.get("seeds", [])]
    expected = runs_count(params)
    agree(len(seeds), expected, "calls")
    agree(len(_answers(data)), expected, "calls")
    order = served.order(seeds[0], len(bases), int(params.get("rounds", 1)))
    truths = []
    for number, seed in enumerate(seeds):
        base = order[number]
        trace = served.perturb(bases[base], seed)
        agree(items["served"][number], served.chunks(served.payload(trace)), "events")
        truths.append({"trace": trace, "label": labels[base], **measure(trace)})
    return truths, source


def _loop(label: str) -> Phrase:
    return Phrase(f"gputrace.loop.{label}")


def _pct(share: float) -> float:
    return round(share * 100, 2)


def _ms(ms: float) -> float:
    return round(ms, 3)


def _figure(truths, answers, field, within, unit, scale, shown) -> Check:
    """The check of one reported figure (``busy`` or ``idle_ms``) on every run: the first run
    off its tolerance is quoted, and said to be in another unit (``unit``: the answer x
    ``scale`` would be right) or missing where that is what happened."""
    name = "gpu_" + field.removesuffix("_ms")
    off = _first(truths, answers, field, within)
    if off is None:
        return Check(name, True, f"check.{name}.passed", {"runs": len(truths)})
    truth, answer = off
    reported = answer.get(field)
    key = f"check.{name}.failed"
    if reported is None:
        key = f"check.{name}.missing"
    elif within(reported * scale, truth[field]):
        key = f"check.{name}.{unit}"
    values = {"loop": _loop(truth["label"]), "reported": shown(reported or 0.0)}
    values[name.removeprefix("gpu_")] = shown(truth[field])
    return Check(name, False, key, values)


def evaluate(params: dict[str, Any], data: dict[str, Any], device: str) -> Evaluation:
    truths, source = _truths(params, data)
    answers = data["runs"]
    checks = []
    not_dict = next((a for a in answers if a.get("type") != "dict"), None)
    if not_dict is not None:
        value = {"type": str(not_dict.get("type", "?"))}
        checks.append(Check("gpu_answer", False, "check.gpu_answer.not_dict", value))
        return Evaluation(checks, None, _metrics(source, truths, answers))

    checks.append(_figure(truths, answers, "busy", within_busy, "percent", 1 / 100, _pct))
    checks.append(_figure(truths, answers, "idle_ms", within_idle, "microseconds", 1 / 1000, _ms))

    wrong = next(
        ((t, a) for t, a in zip(truths, answers, strict=True) if a.get("bottleneck") != t["label"]), None
    )
    if wrong is None:
        named = ", ".join(t["label"] for t in truths)
        checks.append(
            Check(
                "gpu_bottleneck", True, "check.gpu_bottleneck.passed", {"runs": len(truths), "named": named}
            )
        )
    else:
        truth, answer = wrong
        values = {"loop": _loop(truth["label"]), "answer": str(answer.get("bottleneck"))}
        checks.append(Check("gpu_bottleneck", False, "check.gpu_bottleneck.failed", values))

    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(truths, answers)
    return Evaluation(checks, diagnosis, _metrics(source, truths, answers))


def _first(truths, answers, key, within):
    for truth, answer in zip(truths, answers, strict=True):
        reported = answer.get(key)
        if reported is None or not within(reported, truth[key]):
            return truth, answer
    return None


def _metrics(source, truths, answers) -> dict[str, Any]:
    return {
        "trace_source": source,
        "gpu_busy_percent": [_pct(t["busy"]) for t in truths],
        "gpu_idle_ms": [round(t["idle_ms"], 3) for t in truths],
        "named": [str(a.get("bottleneck")) for a in answers],
    }


def diagnose(truths: list[dict[str, Any]], answers: list[dict[str, Any]]) -> Diagnosis | None:
    """The known mistake the answers show, with the learner's own numbers, or None. A reading
    is named only on a trace where it gives another answer than the truth; the memsets left out
    or the edges left out are named only where no run shows another mistake (a reading of the
    kernels alone leaves out the memsets too)."""
    later: Diagnosis | None = None
    for truth, answer in zip(truths, answers, strict=True):
        reported = answer.get("busy")
        if reported is None or within_busy(reported, truth["busy"]):
            continue
        trace = truth["trace"]
        values = {"loop": _loop(truth["label"]), "reported": _pct(reported), "busy": _pct(truth["busy"])}

        def reads(cats: tuple[str, ...], trace: dict[str, Any] = trace, reported: float = reported) -> bool:
            """The answer is this reading's, and this reading is wrong on this trace."""
            share, right = measure(trace, cats)["busy"], measure(trace)["busy"]
            return within_busy(reported, share) and not within_busy(share, right)

        total = summed(trace)
        if within_busy(reported, total) and not within_busy(total, truth["busy"]):
            return Diagnosis("summed-overlaps", values)
        if reads((*DEVICE, "gpu_user_annotation")):
            return Diagnosis("annotations-as-busy", values)
        copies = not within_busy(measure(trace, ("kernel", "gpu_memset"))["busy"], truth["busy"])
        if copies and (reads(("kernel",)) or reads(("kernel", "gpu_memset"))):
            copied = measure(trace, ("gpu_memcpy",))["busy"]
            return Diagnosis("memcpy-ignored", {**values, "copies": _pct(copied)})
        if later is None and reads(("kernel", "gpu_memcpy")):
            memsets = measure(trace, ("gpu_memset",))["busy"]
            later = Diagnosis("memset-ignored", {**values, "memsets": _pct(memsets)})
        edges = inner(trace)
        if later is None and within_busy(reported, edges["busy"]):
            later = _edges(truth, trace, values)
    for truth, answer in zip(truths, answers, strict=True):
        idle = answer.get("idle_ms")
        if later is None and idle is not None and not within_idle(idle, truth["idle_ms"]):
            edges = inner(truth["trace"])
            if within_idle(idle, edges["idle_ms"]):
                values = {"loop": _loop(truth["label"]), "busy": _pct(truth["busy"])}
                values["reported"] = _pct(answer["busy"]) if answer.get("busy") is not None else 0.0
                later = _edges(truth, truth["trace"], values)
    if later is not None:
        return later
    for truth, answer in zip(truths, answers, strict=True):
        named = answer.get("bottleneck")
        if named == truth["label"]:
            continue
        totals = host_labels(truth["trace"])
        largest = max(totals, key=lambda name: totals[name])
        if named in (largest, HOST_READING.get(largest)):
            return Diagnosis(
                "host-labels",
                {
                    "loop": _loop(truth["label"]),
                    "answer": str(named),
                    "label": largest,
                    "label_ms": round(totals[largest], 2),
                    "busy": _pct(truth["busy"]),
                    "idle": round(truth["idle_ms"], 3),
                },
            )
        return None
    return None


def _edges(truth: dict[str, Any], trace: dict[str, Any], values: dict[str, Any]) -> Diagnosis:
    """The span's idle edges left out: the stretches before the GPU's first work and after its
    last, in ms, and the longest idle stretch with them."""
    start, end = span(trace)
    device = [e for e in _events(trace) if e["cat"] in DEVICE]
    first, last = min(e["ts"] for e in device), max(e["ts"] + e["dur"] for e in device)
    values = {**values, "before": _ms((first - start) / 1000), "after": _ms((end - last) / 1000)}
    return Diagnosis("edges-left-out", {**values, "idle": _ms(truth["idle_ms"])})


def diagnose_error(
    params: dict[str, Any], data: dict[str, Any] | None, error: dict[str, Any]
) -> Diagnosis | None:
    return None


def _answers(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs the learner's process reported, held to the shape the harness writes
    (``read_answer``); ``Interfered`` where they are not."""
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise Interfered("shape", detail="no runs")
    for run in runs:
        if not isinstance(run, dict) or not isinstance(run.get("type"), str):
            raise Interfered("shape", detail="a run that is not an answer")
        if run["type"] != "dict":
            continue
        for key in ("busy", "idle_ms"):
            value = run.get(key)
            if value is not None and not _finite(value):
                raise Interfered("shape", detail=f"{key} is not a finite number")
        if run.get("bottleneck") is not None and not isinstance(run["bottleneck"], str):
            raise Interfered("shape", detail="bottleneck is not text")
    return runs


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
