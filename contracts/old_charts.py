"""The charts and facts of a verdict stored before its check kind declared them (issue 47).

Until then the page drew each kind's figures from the kind's metrics (``optimizer_steps``,
``peak_gradient_bytes``, ``timing_runs``…). A stored verdict keeps those metrics, never
rewritten; when it is read, ``contracts.verdict.declared`` calls ``declared`` here once, and
the page draws what this returns as it draws a new verdict's: the same charts, numbers and
texts (the kinds' own keys in messages.d/<kind>.yaml). Frozen: a kind that changes what it
declares changes its check, not this file, which only reads what old rows hold.
"""

from typing import Any

from contracts.messages import Phrase
from contracts.verdict import ChartRecord, FactRecord, bar, chart, clear_winner, fact


def _num(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def declared(metrics: Any) -> tuple[list[ChartRecord], list[FactRecord]]:
    charts: list[ChartRecord] = []
    facts: list[FactRecord] = []
    _accumulation(metrics, charts, facts)
    _lesson5(metrics, charts, facts)
    charts += _configurations(metrics) + _timing(metrics)
    return charts, facts


def _accumulation(metrics: dict[str, Any], charts: list[ChartRecord], facts: list[FactRecord]) -> None:
    bars: list[Any]
    """Gradient accumulation's (and mixed precision's steps): the loss after each step, the
    steps and the update against the large batch, the peak activation memory."""
    key = "figure.accumulation"
    if losses := metrics.get("losses") or []:
        values = [float(v) if isinstance(v, int | float) else None for v in losses]
        said = {}
        if len(values) > 1 and values[0] is not None and values[-1] is not None:
            said = {"first": values[0], "last": values[-1], "n": len(values) - 1}
        lost = [
            bar(f"{key}.losses.start", "yours", v)
            if i == 0
            else bar(f"{key}.losses.after", "yours", v, values={"n": i})
            for i, v in enumerate(values)
        ]
        summary = [f"{key}.losses.summary"] if said else []
        charts.append(
            chart("losses", "fine", lost, f"{key}.losses", scale="lowest", summary=summary, values=said)
        )
    steps, ref_steps = _num(metrics, "optimizer_steps"), _num(metrics, "reference_optimizer_steps")
    if steps is not None and ref_steps is not None:
        bars = [(f"{key}.steps.yours", "yours", steps), (f"{key}.steps.reference", "reference", ref_steps)]
        charts.append(
            chart("steps", "count", bars, f"{key}.steps", note=[], shown="unequal", fact=f"{key}.steps.same")
        )
    elif steps is not None:
        facts.append(fact(f"{key}.steps.title", steps))
    if (ratio := _num(metrics, "update_ratio")) is not None:
        bars = [(f"{key}.update.yours", "yours", ratio), (f"{key}.update.reference", "reference", 1.0)]
        charts.append(
            chart("update", "times", bars, f"{key}.update", shown="texts", fact=f"{key}.update.same")
        )
    peak = _num(metrics, "peak_activation_bytes")
    micro = _num(metrics, "reference_peak_activation_bytes")
    naive = _num(metrics, "large_batch_peak_activation_bytes")
    if peak is not None and micro is not None:
        bars = [
            (f"{key}.memory.yours", "yours", peak),
            (f"{key}.memory.micro", "reference", micro),
        ]
        more = bool(micro) and abs(peak - micro) > 0.001 * max(abs(peak), abs(micro), 1e-12)
        summary = [f"{key}.memory.more" if more else f"{key}.memory.same"]
        if naive is not None:
            bars.append((f"{key}.memory.naive", "naive", naive))
            summary.append(f"{key}.memory.whole")
        times = {"times": peak / micro if micro else 0.0}
        charts.append(
            chart("memory", "bytes", bars, f"{key}.memory", summary=summary, values=times, shown="differ")
        )
    elif peak is not None:
        facts.append(fact(f"{key}.memory.title", peak, "bytes"))


def _lesson5(metrics: dict[str, Any], charts: list[ChartRecord], facts: list[FactRecord]) -> None:
    """Lesson 5's memory before activations: step-in-backward's gradients alive against the plain
    loop's, or train-an-adapter's gradients, optimizer state and numbers trained against full
    fine-tuning."""
    peak = _num(metrics, "peak_gradient_bytes")
    if peak is None:
        return
    plain = _num(metrics, "reference_peak_gradient_bytes")
    alive, all_alive = _num(metrics, "peak_alive_gradients"), _num(metrics, "reference_peak_alive_gradients")
    if plain is not None and alive is not None and all_alive is not None:
        key = "figure.hookstep"
        said = {"size": peak, "all_size": plain}
        summary = f"{key}.alive.fewer" if alive < all_alive else f"{key}.alive.as-many"
        bars = [(f"{key}.alive.yours", "yours", alive), (f"{key}.alive.plain", "naive", all_alive)]
        charts.append(chart("gradients-alive", "count", bars, f"{key}.alive", summary=summary, values=said))
        bars = [(f"{key}.gradients.yours", "yours", peak), (f"{key}.gradients.plain", "naive", plain)]
        charts.append(chart("gradients", "bytes", bars, f"{key}.gradients"))
        if (calls := _num(metrics, "optimizer_step_calls")) is not None:
            facts.append(fact("fact.hookstep.step-calls", calls))
        return
    if _num(metrics, "full_gradient_bytes") is None:
        return
    for chart_id, texts, unit, keys in (
        ("gradients", "gradients", "bytes", ("peak_gradient_bytes", "full_gradient_bytes")),
        ("optimizer-state", "state", "bytes", ("optimizer_state_bytes", "full_optimizer_state_bytes")),
        ("trained", "trained", "count", ("trained_parameters", "model_parameters")),
    ):
        yours, full = _num(metrics, keys[0]), _num(metrics, keys[1])
        if yours is not None and full is not None:
            key = f"figure.adapter.{texts}"
            bars = [(f"{key}.yours", "yours", yours), (f"{key}.full", "naive", full)]
            charts.append(chart(chart_id, unit, bars, key))


NAMES = [("fp32", None), ("low", None), ("accum", "accum"), ("checkpoint", "checkpoint"), ("all", "all")]


def _configurations(metrics: dict[str, Any]) -> list[ChartRecord]:
    """Measure it on your card: time per step and peak memory of each configuration."""
    key = "figure.measure"
    low_name = str(metrics.get("low_precision") or "bfloat16")

    def named(config: str, text: str | None) -> dict[str, Any]:
        if text is not None:
            return {"label": f"{key}.{text}"}
        return {"label": f"{key}.{config}", "name": "float32" if config == "fp32" else low_name}

    def said(config: str, text: str | None) -> Any:
        return named(config, text).get("name") or Phrase(f"{key}.{text}")

    timed = [(c, t, _num(metrics, f"{c}_ms_per_step")) for c, t in NAMES]
    timed = [(c, t, ms) for c, t, ms in timed if ms is not None]
    if not timed:
        return []
    gpu: Any = metrics.get("measured_on")
    if "measured_on" not in metrics and metrics.get("device") == "cuda":
        gpu = Phrase(f"{key}.this-gpu")
    if not isinstance(gpu, Phrase) and (not isinstance(gpu, str) or not gpu or gpu == "cpu"):
        gpu = None
    where = "gpu" if gpu is not None else "cpu"
    spreads = [
        (_num(metrics, f"{c}_ms_low"), _num(metrics, f"{c}_ms_high"), _num(metrics, f"{c}_timed_steps"))
        for c, _t, _ms in timed
    ]
    if not all(lo is not None and hi is not None and n for lo, hi, n in spreads):
        best = min(range(len(timed)), key=lambda i: timed[i][2])  # type: ignore[arg-type, return-value]
        bars = [bar(**named(c, t), kind="reference", value=ms) for c, t, ms in timed]
        values = {"gpu": gpu, "label": said(*timed[best][:2]), "ms": timed[best][2]}
        time = chart(
            "configurations-time",
            "ms",
            bars,
            f"{key}.time",
            note=f"{key}.time.once-{where}",
            summary=f"{key}.time.once",
            values=values,
        )
    else:
        timings = [
            (ms or 0.0, lo or 0.0, hi or 0.0)
            for (_c, _t, ms), (lo, hi, _n) in zip(timed, spreads, strict=True)
        ]
        winner = clear_winner(timings)
        bars = [
            bar(**named(c, t), kind="yours" if i == winner else "reference", value=ms, low=lo, high=hi)
            for i, ((c, t, ms), (_m, lo, hi)) in enumerate(zip(timed, timings, strict=True))
        ]
        best = min(range(len(timed)), key=lambda i: timings[i][0])
        values = {
            "gpu": gpu,
            "n": min(n or 0 for *_r, n in spreads),
            "label": said(*timed[best][:2]),
            "ms": timings[best][0],
        }
        if winner is not None:
            summary = f"{key}.time.fastest"
        elif len(timed) > 1:
            rival = min((i for i in range(len(timed)) if i != best), key=lambda i: timings[i][1])
            values["other"] = said(*timed[rival][:2])
            summary = f"{key}.time.overlap"
        else:
            summary = f"{key}.time.alone"
        time = chart(
            "configurations-time",
            "ms",
            bars,
            f"{key}.time",
            note=f"{key}.time.{where}",
            summary=summary,
            values=values,
        )
    charts = [time]
    peaks = [(c, t, _num(metrics, f"{c}_peak_bytes")) for c, t in NAMES]
    peaks = [(c, t, b) for c, t, b in peaks if b is not None]
    if peaks:
        small = min(range(len(peaks)), key=lambda i: peaks[i][2])  # type: ignore[arg-type, return-value]
        bars = [
            bar(**named(c, t), kind="yours" if i == small else "reference", value=b)
            for i, (c, t, b) in enumerate(peaks)
        ]
        on = "gpu" if metrics.get("peak_measure") == "max_memory_allocated" else "cpu"
        values = {"label": said(*peaks[small][:2]), "peak": peaks[small][2]}
        charts.append(
            chart(
                "configurations-memory",
                "bytes",
                bars,
                f"{key}.memory",
                note=f"{key}.memory.{on}",
                values=values,
            )
        )
    return charts


def _timing(metrics: dict[str, Any]) -> list[ChartRecord]:
    """Time a step: each run's time per step as the learner measured it beside what the
    grader's device really took, with the loader and on one batch."""
    key = "figure.timing"
    charts = []
    for run in metrics.get("timing_runs") or []:
        if not isinstance(run, dict) or _num(run, "step_ms") is None or _num(run, "true_step_ms") is None:
            continue
        rows = [("yours", "step_ms", "yours"), ("truth", "true_step_ms", "reference")]
        rows += [("yours-same", "same_batch_ms", "yours"), ("truth-same", "true_same_batch_ms", "reference")]
        bars = [(f"{key}.{label}", kind, _num(run, k)) for label, k, kind in rows if _num(run, k) is not None]
        title = f"{key}.device.title" if run.get("scenario") == "device" else f"{key}.loading.title"
        charts.append(chart(f"timing-{run.get('scenario')}", "ms", bars, key, title=title))
    return charts
