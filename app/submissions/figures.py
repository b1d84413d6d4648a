"""The measured figures of a verdict, shaped for the page: small bar charts that are tables.

Each figure is a table (label, bar, value): the bars are inline SVG drawn by the template,
the numbers are text, so the chart and its data table are the same element; its summary says
the same numbers in a sentence. A chart is drawn only where it shows a difference (3 steps
against 3 steps is a plain fact), and scaled so that the difference is visible: losses that
differ in the third decimal are not drawn as bars from zero.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.i18n import current_lang, ngettext, number
from app.i18n import gettext as _
from contracts import messages

# Below this relative spread, bars of the values would look the same: say it in words instead.
VISIBLE = 0.001


@dataclass(frozen=True)
class Bar:
    label: str
    text: str  # the value as the learner's language writes it
    share: float | None  # bar length, 0–100 (None: no bar, the value alone)
    kind: str = "yours"  # yours | reference | naive (CSS classes)
    detail: str = ""  # a second line under the value (the spread of a median)
    spread: tuple[float, float] | None = None  # the spread drawn over the bar, 0–100 like share


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    bars: list[Bar]
    note: str = ""
    summary: str = ""  # the figure in one plain sentence, with the same numbers as the bars


@dataclass(frozen=True)
class Figures:
    charts: list[Figure] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)  # (label, value): no chart

    def __bool__(self) -> bool:
        return bool(self.charts or self.facts)


def size(n: float) -> str:
    """Bytes as the verdict's messages write them (contracts.messages.size: B, KiB, MiB)."""
    return messages.size(n, current_lang())


def seconds(ms: float) -> str:
    return f"{number(ms / 1000, 1)} s"


def _from_zero(rows: list[tuple[str, float, str, str]]) -> list[Bar]:
    """Bars from zero: right when the values' ratio is the point (4× the update, ¼ the memory)."""
    top = max((value for _label, value, _text, _kind in rows), default=0) or 1
    return [
        Bar(label, text, max(100 * value / top, 1.5 if value > 0 else 0), kind)
        for label, value, text, kind in rows
    ]


def _differ(a: float, b: float) -> bool:
    return abs(a - b) > VISIBLE * max(abs(a), abs(b), 1e-12)


def _num(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _losses(losses: list) -> Figure:
    """The loss after each step. Bars start just below the smallest value, so 1.0873 against
    1.0772 shows; when nothing visible changed, the values alone. None: not a finite number."""
    values = [float(v) if isinstance(v, int | float) else None for v in losses]
    finite = [v for v in values if v is not None]
    low, high = min(finite, default=0.0), max(finite, default=0.0)
    drawn = len(finite) > 1 and _differ(low, high)
    labels = [_("Start") if i == 0 else _("After step %(n)d") % {"n": i} for i in range(len(values))]
    bars = [
        Bar(
            label,
            "—" if v is None else number(v, 4),
            None if not drawn or v is None else 8 + 92 * (v - low) / (high - low),
        )
        for label, v in zip(labels, values, strict=True)
    ]
    if finite and values[0] is not None and values[-1] is not None and len(values) > 1:
        summary = _("From %(first)s at the start to %(last)s after step %(n)d.") % {
            "first": number(values[0], 4),
            "last": number(values[-1], 4),
            "n": len(values) - 1,
        }
    else:
        summary = ""
    if drawn:
        note = _("The bars start at %(low)s, not at zero, so that small changes show.") % {
            "low": number(low, 4)
        }
    else:
        note = _("Measured on every micro-batch with your parameters after each step.")
    return Figure("losses", _("Loss on the exercise's data"), bars, note, summary)


def figures(verdict: dict[str, Any]) -> Figures:
    """What the verdict measured, as charts and plain facts (empty when nothing was measured)."""
    metrics = verdict.get("metrics") or {}
    charts: list[Figure] = []
    facts: list[tuple[str, str]] = []
    if losses := metrics.get("losses") or []:
        charts.append(_losses(losses))
    steps, ref_steps = _num(metrics, "optimizer_steps"), _num(metrics, "reference_optimizer_steps")
    if steps is not None and ref_steps is not None and steps != ref_steps:
        charts.append(
            Figure(
                "steps",
                _("Optimizer steps"),
                _from_zero(
                    [
                        (_("Yours"), steps, number(steps, 0), "yours"),
                        (_("Large batch"), ref_steps, number(ref_steps, 0), "reference"),
                    ]
                ),
                summary=ngettext(
                    "You took %(yours)s optimizer step; the large batch takes %(reference)s.",
                    "You took %(yours)s optimizer steps; the large batch takes %(reference)s.",
                    int(steps),
                )
                % {"yours": number(steps, 0), "reference": number(ref_steps, 0)},
            )
        )
    elif steps is not None:
        facts.append(
            (
                _("Optimizer steps"),
                number(steps, 0)
                if ref_steps is None
                else _("%(steps)s, as the large batch") % {"steps": number(steps, 0)},
            )
        )
    ratio = _num(metrics, "update_ratio")
    if ratio is not None and number(ratio) != number(1.0):  # a difference the text shows
        charts.append(
            Figure(
                "update",
                _("Size of each update"),
                _from_zero(
                    [
                        (_("Yours"), ratio, f"{number(ratio)}×", "yours"),
                        (_("Large batch"), 1.0, f"{number(1.0)}×", "reference"),
                    ]
                ),
                _("Median over the steps, against the large-batch update."),
                _("Each of your updates was %(ratio)s× the large-batch update.") % {"ratio": number(ratio)},
            )
        )
    elif ratio is not None:
        facts.append(
            (_("Size of each update"), _("%(ratio)s×, as the large batch") % {"ratio": number(ratio)})
        )
    peak = _num(metrics, "peak_activation_bytes")
    micro = _num(metrics, "reference_peak_activation_bytes")
    naive = _num(metrics, "large_batch_peak_activation_bytes")
    if peak is not None and micro is not None and (naive is not None or _differ(peak, micro)):
        rows = [
            (_("Yours"), peak, size(peak), "yours"),
            (_("One micro-batch"), micro, size(micro), "reference"),
        ]
        if naive is not None:
            rows.append((_("Whole large batch"), naive, size(naive), "naive"))
        if micro and _differ(peak, micro):
            summary = _(
                "Your loop held %(peak)s at its busiest moment, %(times)s× what one "
                "micro-batch needs (%(micro)s)."
            ) % {"peak": size(peak), "times": number(peak / micro), "micro": size(micro)}
        else:
            summary = _("Your loop held %(peak)s at its busiest moment, as much as one micro-batch.") % {
                "peak": size(peak)
            }
        if naive is not None:
            summary += " " + _("The whole large batch at once would need %(naive)s.") % {"naive": size(naive)}
        charts.append(
            Figure(
                "memory",
                _("Peak activation memory"),
                _from_zero(rows),
                _("Bytes saved for backward at the busiest moment."),
                summary,
            )
        )
    elif peak is not None:
        facts.append((_("Peak activation memory"), size(peak)))
    lesson5, counted = _gradients(metrics)
    charts += lesson5 + _configurations(metrics) + _timing(metrics) + _declared(metrics)
    facts += counted
    if (ms := _num(metrics, "sandbox_ms")) is not None:
        facts.append((_("Running your code"), seconds(ms)))
    if (ms := _num(metrics, "check_ms")) is not None:
        facts.append((_("Checking it"), seconds(ms)))
    if device := metrics.get("device"):
        facts.append((_("Device"), str(device).upper()))
    return Figures(charts, facts)


def _declared(metrics: dict) -> list[Figure]:
    """The bar charts a check kind declares (``contracts.verdict.chart``): drawn from zero, with
    the kind's own texts (figure.<id>.*), so that a new kind's chart needs nothing here. A chart
    that is not well formed, or whose texts are gone, is left out: an old row never breaks a page."""
    lang = current_lang()
    drawn = []
    for spec in metrics.get("charts") or []:
        try:
            chart_id, unit = str(spec["id"]), spec["unit"]
            bars = [(str(b["label"]), float(b["value"]), str(b["kind"])) for b in spec["bars"]]
            say = _UNITS[unit]
            rows = [
                (messages.text(f"figure.{chart_id}.{label}", lang), v, say(v), kind)
                for label, v, kind in bars
            ]
            values = {label: value for label, value, _kind in bars}
            title, note, summary = (
                messages.render(f"figure.{chart_id}.{part}", lang, values)
                for part in ("title", "note", "summary")
            )
        except (KeyError, TypeError, ValueError, IndexError):
            continue
        drawn.append(Figure(chart_id, title, _from_zero(rows), note, summary))
    return drawn


_UNITS: dict[str, Callable[[float], str]] = {
    "bytes": size,
    "times": lambda v: f"{number(v)}×",
    "count": lambda v: number(v, 0),
}


def _configurations(metrics: dict) -> list[Figure]:
    """ "Measure it on your card": time per step and peak memory of each configuration the
    loop ran in, where the verdict has them (bars from zero: the ratios are the lesson)."""
    low = str(metrics.get("low_precision") or "bfloat16")
    names = [
        ("fp32", "float32"),
        ("low", low),
        ("accum", _("accumulation")),
        ("checkpoint", _("checkpointing")),
        ("all", _("all three")),
    ]
    times = [(label, _num(metrics, f"{key}_ms_per_step")) for key, label in names]
    peaks = [(label, _num(metrics, f"{key}_peak_bytes")) for key, label in names]
    if not any(value is not None for _label, value in times):
        return []
    spreads = {
        label: (
            _num(metrics, f"{key}_ms_low"),
            _num(metrics, f"{key}_ms_high"),
            _num(metrics, f"{key}_timed_steps"),
        )
        for key, label in names
    }
    charts = [
        _times([(label, value, *spreads[label]) for label, value in times if value is not None], metrics)
    ]
    measured = [(label, value) for label, value in peaks if value is not None]
    if measured:
        smallest = min(measured, key=lambda row: row[1])
        on_gpu = metrics.get("peak_measure") == "max_memory_allocated"
        charts.append(
            Figure(
                "configurations-memory",
                _("Peak memory, by configuration"),
                _from_zero(
                    [
                        (label, value, size(value), "yours" if label == smallest[0] else "reference")
                        for label, value in measured
                    ]
                ),
                _("torch.cuda.max_memory_allocated during the steps.")
                if on_gpu
                else _("Bytes of live tensors at the busiest moment (this worker has no GPU)."),
                _("The smallest peak was %(label)s, with %(peak)s.")
                % {"label": smallest[0], "peak": size(smallest[1])},
            )
        )
    return charts


def clear_winner(timings: Sequence[tuple[float, float, float]]) -> int | None:
    """Which of these (median, low, high) timings was clearly the fastest: the one with the
    lowest median, if the top of its spread is below the bottom of every other's; None when the
    spreads overlap (the difference is within the noise) or there is nothing to beat."""
    if len(timings) < 2:
        return None
    best = min(range(len(timings)), key=lambda i: timings[i][0])
    top = timings[best][2]
    return best if all(top < low for i, (_m, low, _h) in enumerate(timings) if i != best) else None


def _times(rows: list[tuple[str, float, float | None, float | None, float | None]], metrics: dict) -> Figure:
    """Time per step of each configuration: the median step, the middle half of the steps
    beside it (text) and over it (a line), and a fastest named only when it clearly was."""
    gpu = metrics.get("measured_on")  # the harness names the card it timed on, or "cpu"
    if "measured_on" not in metrics and metrics.get("device") == "cuda":  # a verdict from before
        gpu = _("this worker's GPU")
    if not isinstance(gpu, str) or not gpu or gpu == "cpu":
        gpu = None
    spread = all(low is not None and high is not None and n for _l, _m, low, high, n in rows)
    if not spread:  # a verdict from before the step times: one timed run per configuration
        fastest = min(rows, key=lambda row: row[1])
        return Figure(
            "configurations-time",
            _("Time per step, by configuration"),
            _from_zero([(label, ms, f"{number(ms)} ms", "reference") for label, ms, *_rest in rows]),
            _(
                "Wall-clock time per optimizer step on %(gpu)s, synchronised before and after, in one "
                "timed run. Shorter is faster."
            )
            % {"gpu": gpu}
            if gpu
            else _(
                "Wall-clock time per optimizer step on this worker's CPU (it has no GPU), which other "
                "jobs share: small differences can be noise. Shorter is faster."
            ),
            _(
                "%(label)s took the least time, %(ms)s ms per step, in one timed run each: too few to "
                "tell a real difference from noise."
            )
            % {"label": fastest[0], "ms": number(fastest[1])},
        )
    timings = [(ms, float(low or 0), float(high or 0)) for _label, ms, low, high, _n in rows]
    winner = clear_winner(timings)
    top = max(max(ms, high) for ms, _low, high in timings) or 1
    bars = [
        Bar(
            label,
            f"{number(ms)} ms",
            max(100 * ms / top, 1.5 if ms > 0 else 0),
            "yours" if i == winner else "reference",
            f"{number(low)}–{number(high)}",
            (100 * low / top, max(100 * high / top, 100 * low / top + 0.8)),
        )
        for i, ((label, *_rest), (ms, low, high)) in enumerate(zip(rows, timings, strict=True))
    ]
    steps = number(min(n or 0 for *_rest, n in rows), 0)
    if gpu:
        note = _(
            "Median time per optimizer step on %(gpu)s, synchronised at every step, over %(n)s timed steps "
            "per configuration; under each median, the middle half of those steps, also drawn as a thin "
            "line. Shorter is faster."
        ) % {"gpu": gpu, "n": steps}
    else:
        note = _(
            "Median time per optimizer step on this worker's CPU (it has no GPU, and other jobs share it), "
            "over %(n)s timed steps per configuration; under each median, the middle half of those steps, "
            "also drawn as a thin line. Shorter is faster."
        ) % {"n": steps}
    if winner is not None:
        summary = _(
            "The fastest was %(label)s, at %(ms)s ms per step: the middle half of its steps stayed below "
            "every other configuration's."
        ) % {"label": rows[winner][0], "ms": number(timings[winner][0])}
    else:
        best = min(range(len(rows)), key=lambda i: timings[i][0])
        others = [i for i in range(len(rows)) if i != best]
        if others:
            rival = min(others, key=lambda i: timings[i][1])
            summary = _(
                "No configuration was clearly fastest: %(label)s had the lowest median, %(ms)s ms per "
                "step, but the middle half of its steps overlaps that of %(other)s, so the difference is "
                "within this worker's noise."
            ) % {"label": rows[best][0], "ms": number(timings[best][0]), "other": rows[rival][0]}
        else:
            summary = _("%(label)s took %(ms)s ms per step.") % {
                "label": rows[best][0],
                "ms": number(timings[best][0]),
            }
    return Figure("configurations-time", _("Time per step, by configuration"), bars, note, summary)


def _count(n: float) -> str:
    return number(n, 0)


def _against(
    name: tuple[str, str], values: tuple[float, float, str, Callable[[float], str]], note: str, summary: str
) -> Figure:
    """A chart of the learner's loop against one other: `name` is (slug, title), `values` is
    (yours, theirs, their label, how a value is written); both bars drawn from zero."""
    yours, theirs, label, shown = values
    bars = _from_zero([(_("Yours"), yours, shown(yours), "yours"), (label, theirs, shown(theirs), "naive")])
    return Figure(name[0], name[1], bars, note, summary)


# a chart of two figures of the verdict: their keys (the learner's, the other loop's), (slug,
# title), how a value is written, the note, and the summary (it says them as %(yours)s and
# %(full)s; a function of the learner's figure where its wording is plural or singular)
Compared = tuple[tuple[str, str], tuple[str, str], Callable[[float], str], str, str | Callable[[int], str]]


def _compared(metrics: dict, other: str, spec: Compared) -> list[Figure]:
    """``_against`` the loop labelled ``other``, or no chart where either figure is missing."""
    keys, name, shown, note, summary = spec
    yours, theirs = _num(metrics, keys[0]), _num(metrics, keys[1])
    if yours is None or theirs is None:
        return []
    text = summary if isinstance(summary, str) else summary(int(yours))
    values = {"yours": shown(yours), "full": shown(theirs)}
    return [_against(name, (yours, theirs, other, shown), note, text % values)]


def _gradients(metrics: dict) -> tuple[list[Figure], list[tuple[str, str]]]:
    """Lesson 5's memory before activations, the learner's loop against the plain one: the
    gradients alive at once (step-in-backward), or the gradients, the optimizer's state and the
    numbers trained against full fine-tuning (train-an-adapter). Always drawn: a loop that holds
    as much as the plain one is the lesson's point too."""
    peak = _num(metrics, "peak_gradient_bytes")
    if peak is None:
        return [], []
    charts: list[Figure] = []
    facts: list[tuple[str, str]] = []
    plain = _num(metrics, "reference_peak_gradient_bytes")
    alive, all_alive = _num(metrics, "peak_alive_gradients"), _num(metrics, "reference_peak_alive_gradients")
    gradient_note = _("Bytes of the gradients alive when an optimizer stepped, at the most.")
    if plain is not None and alive is not None and all_alive is not None:
        values = {
            "num": number(alive, 0),
            "size": size(peak),
            "all": number(all_alive, 0),
            "all_size": size(plain),
        }
        if alive < all_alive:
            summary = ngettext(
                "At its busiest your loop held %(num)s gradient (%(size)s); the plain loop holds all "
                "%(all)s (%(all_size)s) until its optimizer step.",
                "At its busiest your loop held %(num)s gradients (%(size)s); the plain loop holds all "
                "%(all)s (%(all_size)s) until its optimizer step.",
                int(alive),
            )
        else:
            summary = ngettext(
                "Your loop held %(num)s gradient at once (%(size)s); the plain loop holds %(all)s "
                "(%(all_size)s) until its optimizer step.",
                "Your loop held %(num)s gradients at once (%(size)s); the plain loop holds %(all)s "
                "(%(all_size)s) until its optimizer step.",
                int(alive),
            )
        plain_loop = _("Plain loop")
        charts.append(
            _against(
                ("gradients-alive", _("Gradients alive at once")),
                (alive, all_alive, plain_loop, _count),
                _(
                    "Gradients still held (not None) at an optimizer step or between two batches, "
                    "at the most."
                ),
                summary % values,
            )
        )
        charts += _compared(
            metrics,
            plain_loop,
            (
                ("peak_gradient_bytes", "reference_peak_gradient_bytes"),
                ("gradients", _("Gradient memory at the peak")),
                size,
                gradient_note,
                _("Your loop's gradients took up to %(yours)s; the plain loop's take %(full)s."),
            ),
        )
        if (calls := _num(metrics, "optimizer_step_calls")) is not None:
            facts.append((_("Optimizer step calls"), number(calls, 0)))
        return charts, facts
    if _num(metrics, "full_gradient_bytes") is None:
        return [], []
    specs: list[Compared] = [
        (
            ("peak_gradient_bytes", "full_gradient_bytes"),
            ("gradients", _("Gradient memory at the peak")),
            size,
            gradient_note,
            _("Your loop's gradients took up to %(yours)s; training the whole model takes %(full)s."),
        ),
        (
            ("optimizer_state_bytes", "full_optimizer_state_bytes"),
            ("optimizer-state", _("Optimizer state")),
            size,
            _("Adam keeps two numbers (exp_avg and exp_avg_sq) for every number it trains."),
            _("Your optimizer kept %(yours)s of state; for the whole model Adam keeps %(full)s."),
        ),
        (
            ("trained_parameters", "model_parameters"),
            ("trained", _("Numbers trained")),
            _count,
            _("Numbers in the tensors handed to the optimizer."),
            lambda trained: ngettext(
                "Your optimizer trained %(yours)s number; the model holds %(full)s.",
                "Your optimizer trained %(yours)s numbers; the model holds %(full)s.",
                trained,
            ),
        ),
    ]
    return [chart for spec in specs for chart in _compared(metrics, _("Full fine-tuning"), spec)], facts


def _timing(metrics: dict) -> list[Figure]:
    """ "Time a step": each run's time per step as the learner measured it beside what the
    grader's device really took, with the loader and on one batch (bars from zero)."""
    charts = []
    for run in metrics.get("timing_runs") or []:
        if not isinstance(run, dict) or not all(
            _num(run, k) is not None for k in ("step_ms", "true_step_ms")
        ):
            continue
        device = run.get("scenario") == "device"
        rows = [
            (_("Yours, with the loader"), _num(run, "step_ms"), "yours"),
            (_("Really, with the loader"), _num(run, "true_step_ms"), "reference"),
            (_("Yours, one batch"), _num(run, "same_batch_ms"), "yours"),
            (_("Really, one batch"), _num(run, "true_same_batch_ms"), "reference"),
        ]
        shown = [(label, v, f"{number(v)} ms", kind) for label, v, kind in rows if v is not None]
        charts.append(
            Figure(
                f"timing-{run.get('scenario')}",
                _("Where the device was the slower") if device else _("Where loading was the slower"),
                _from_zero(shown),
                _("Milliseconds per step; “really” is what the grader saw its device and loader take."),
                _("You measured %(yours)s ms per step with the loader; each step really took %(truth)s ms.")
                % {
                    "yours": number(_num(run, "step_ms") or 0),
                    "truth": number(_num(run, "true_step_ms") or 0),
                },
            )
        )
    return charts
