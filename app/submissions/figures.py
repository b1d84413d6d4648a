"""The measured figures of a verdict, shaped for the page: small bar charts that are tables.

Each figure is a table (label, bar, value): the bars are inline SVG drawn by the template,
the numbers are text, so the chart and its data table are the same element.
"""

from dataclasses import dataclass, field
from typing import Any

from app.i18n import gettext as _
from app.i18n import number


@dataclass(frozen=True)
class Bar:
    label: str
    text: str  # the value as the learner's language writes it
    share: float  # bar length, 0–100, relative to the figure's largest value
    kind: str = "yours"  # yours | reference | naive (CSS classes)


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    bars: list[Bar]
    note: str = ""
    kind: str = "bars"


@dataclass(frozen=True)
class Figures:
    charts: list[Figure] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)  # (label, value): no chart

    def __bool__(self) -> bool:
        return bool(self.charts or self.facts)


def size(n: float) -> str:
    """Bytes as KB/MB (1024) beyond ten thousand; exact bytes below."""
    if n < 10_000:
        return f"{number(n, 0)} B"
    if n < 10 * 1024 * 1024:
        return f"{number(n / 1024, 1)} KB"
    return f"{number(n / 1024 / 1024, 1)} MB"


def seconds(ms: float) -> str:
    return f"{number(ms / 1000, 1)} s"


def _bars(rows: list[tuple[str, float, str, str]]) -> list[Bar]:
    top = max((value for _label, value, _text, _kind in rows), default=0) or 1
    return [Bar(label, text, max(100 * value / top, 1.5 if value > 0 else 0), kind)
            for label, value, text, kind in rows]


def _num(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def figures(verdict: dict[str, Any]) -> Figures:
    """What the verdict measured, as charts and plain facts (empty when nothing was measured)."""
    metrics = verdict.get("metrics") or {}
    charts: list[Figure] = []
    losses = metrics.get("losses") or []
    if losses:  # None: the loss was not a finite number at that step
        rows = [(_("Start") if i == 0 else _("After step %(n)d") % {"n": i},
                 float(v) if isinstance(v, int | float) else 0.0,
                 number(v, 4) if isinstance(v, int | float) else "—", "yours")
                for i, v in enumerate(losses)]
        charts.append(Figure("losses", _("Loss on the exercise's data"), _bars(rows),
                             _("Measured on every micro-batch with your parameters after each step.")))
    steps, ref_steps = _num(metrics, "optimizer_steps"), _num(metrics, "reference_optimizer_steps")
    if steps is not None and ref_steps is not None:
        charts.append(Figure("steps", _("Optimizer steps"), _bars([
            (_("Yours"), steps, number(steps, 0), "yours"),
            (_("Large batch"), ref_steps, number(ref_steps, 0), "reference")])))
    ratio = _num(metrics, "update_ratio")
    if ratio is not None:
        charts.append(Figure("update", _("Size of each update"), _bars([
            (_("Yours"), ratio, f"{number(ratio)}×", "yours"),
            (_("Large batch"), 1.0, f"{number(1.0)}×", "reference")]),
            _("Median over the steps, against the large-batch update.")))
    peak = _num(metrics, "peak_activation_bytes")
    micro = _num(metrics, "reference_peak_activation_bytes")
    naive = _num(metrics, "large_batch_peak_activation_bytes")
    if peak is not None and micro is not None:
        rows = [(_("Yours"), peak, size(peak), "yours"),
                (_("One micro-batch"), micro, size(micro), "reference")]
        if naive is not None:
            rows.append((_("Whole large batch"), naive, size(naive), "naive"))
        charts.append(Figure("memory", _("Peak activation memory"), _bars(rows),
                             _("Bytes saved for backward at the busiest moment.")))
    facts: list[tuple[str, str]] = []
    if steps is not None and ref_steps is None:
        facts.append((_("Optimizer steps"), number(steps, 0)))
    if peak is not None and micro is None:
        facts.append((_("Peak activation memory"), size(peak)))
    if (ms := _num(metrics, "sandbox_ms")) is not None:
        facts.append((_("Running your code"), seconds(ms)))
    if (ms := _num(metrics, "check_ms")) is not None:
        facts.append((_("Checking it"), seconds(ms)))
    if device := metrics.get("device"):
        facts.append((_("Device"), str(device).upper()))
    return Figures(charts, facts)
