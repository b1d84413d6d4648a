"""The measured figures of a verdict, shaped for the page: small bar charts that are tables.

The charts and facts are the ones the verdict's check kind declares (``contracts.verdict``:
``ChartRecord``, ``FactRecord``), their texts the kind's own messages: nothing here knows a kind.
Each figure is a table (label, bar, value): the bars are inline SVG drawn by the template,
the numbers are text, so the chart and its data table are the same element; its summary says
the same numbers in a sentence. A chart is drawn only where it shows a difference (3 steps
against 3 steps is a plain fact, where the kind says so), and scaled so that the difference is
visible: losses that differ in the third decimal are not drawn as bars from zero.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.i18n import current_lang, number
from app.i18n import gettext as _
from contracts import messages
from contracts.verdict import ChartRecord, FactRecord, declared

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


def _with_spread(rows: list[tuple[str, float, str, str]], spreads: list[tuple[float, float]]) -> list[Bar]:
    """Bars of medians from zero, each with the middle half of its samples written under it and
    drawn over it as a line; the top of the highest spread sets the scale."""
    top = max(max(value, high) for (_l, value, _t, _k), (_low, high) in zip(rows, spreads, strict=True)) or 1
    return [
        Bar(
            label,
            text,
            max(100 * value / top, 1.5 if value > 0 else 0),
            kind,
            f"{number(low)}–{number(high)}",
            (100 * low / top, max(100 * high / top, 100 * low / top + 0.8)),
        )
        for (label, value, text, kind), (low, high) in zip(rows, spreads, strict=True)
    ]


def _differ(a: float, b: float) -> bool:
    return abs(a - b) > VISIBLE * max(abs(a), abs(b), 1e-12)


def _num(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_UNITS: dict[str, Callable[[float], str]] = {
    "bytes": size,
    "times": lambda v: f"{number(v)}×",
    "count": lambda v: number(v, 0),
    "ms": lambda v: f"{number(v)} ms",
    "fine": lambda v: number(v, 4),
}


def _from_lowest(
    rows: list[tuple[str, float | None, str, str]], say: Callable[[float], str]
) -> tuple[list[Bar], str]:
    """Bars that start just below the smallest value, so 1.0873 against 1.0772 shows, and the
    note that says where they start; when nothing visible changed, the values alone."""
    finite = [v for _label, v, _text, _kind in rows if v is not None]
    low, high = min(finite, default=0.0), max(finite, default=0.0)
    drawn = len(finite) > 1 and _differ(low, high)
    bars = [
        Bar(label, text, None if not drawn or v is None else 8 + 92 * (v - low) / (high - low), kind)
        for label, v, text, kind in rows
    ]
    note = _("The bars start at %(low)s, not at zero, so that small changes show.") % {"low": say(low)}
    return bars, note if drawn else ""


def _shown(rule: str, values: list[float | None], texts: list[str]) -> bool:
    """Whether the bars show a difference by the chart's rule (``contracts.verdict.Shown``)."""
    finite = [v for v in values if v is not None]
    if rule == "differ":
        return any(_differ(a, b) for a in finite for b in finite)
    if rule == "unequal":
        return len(set(finite)) > 1
    if rule == "texts":
        return len(set(texts)) > 1
    return True


def _first_form(spec: ChartRecord) -> ChartRecord:
    """A chart of the first form (figure.<id>.* keys) in the form of every other."""
    if "title" in spec:
        return spec
    key = f"figure.{spec['id']}"
    bars = [{**b, "label": f"{key}.{b['label']}"} for b in spec["bars"]]
    return {
        **spec,
        "bars": bars,  # type: ignore[typeddict-item]
        "title": f"{key}.title",
        "note": [f"{key}.note"],
        "summary": [f"{key}.summary"],
    }


def _chart(spec: ChartRecord, lang: str) -> Figure | tuple[str, str] | None:
    """A declared chart as the page draws it, or as a fact (label, value) where it shows no
    difference; None where it says nothing to draw."""
    spec = _first_form(spec)
    say = _UNITS[spec["unit"]]
    rows: list[tuple[str, float | None, str, str]] = []
    quoted: dict[str, Any] = {}
    for b in spec["bars"]:
        value = None if b["value"] is None else float(b["value"])
        label = b.get("name") or messages.render(b["label"], lang, messages.decode(b.get("values")))
        rows.append((str(label), value, "—" if value is None else say(value), str(b["kind"])))
        quoted[b["label"].rsplit(".", 1)[-1]] = value
    if not rows:
        return None
    values = {**quoted, **messages.decode(spec.get("values") or {})}
    title = messages.text(spec["title"], lang)
    if not _shown(spec.get("shown", "always"), [v for _l, v, _t, _k in rows], [t for _l, _v, t, _k in rows]):
        said = messages.render(spec["fact"], lang, values) if spec.get("fact") else rows[0][2]
        return title, said
    note, summary = (
        " ".join(messages.render(key, lang, values) for key in keys)
        for keys in (spec["note"], spec["summary"])
    )
    spreads = [(b.get("low"), b.get("high")) for b in spec["bars"]]
    if spec.get("scale") == "lowest":
        bars, starts = _from_lowest(rows, say)
        note = starts or note
    elif all(low is not None and high is not None for low, high in spreads):
        bars = _with_spread(
            [(lb, v or 0.0, t, k) for lb, v, t, k in rows],
            [(float(lo), float(hi)) for lo, hi in spreads],  # type: ignore[arg-type]
        )
    else:
        bars = _from_zero([(lb, v or 0.0, t, k) for lb, v, t, k in rows])
    return Figure(spec["id"], title, bars, note, summary)


def _fact(spec: FactRecord, lang: str) -> tuple[str, str]:
    label = messages.text(spec["label"], lang)
    if "text" in spec:
        return label, messages.render(spec["text"], lang, messages.decode(spec.get("values") or {}))
    return label, _UNITS[spec.get("unit", "count")](float(spec.get("value") or 0))


def figures(verdict: dict[str, Any]) -> Figures:
    """What the verdict measured, as charts and plain facts (empty when nothing was measured).
    A chart or fact that is not well formed, or whose texts are gone, is left out: an old row
    never breaks a page."""
    metrics = verdict.get("metrics") or {}
    lang = current_lang()
    charts: list[Figure] = []
    facts: list[tuple[str, str]] = []
    declared_charts, declared_facts = declared(metrics)
    for spec in declared_charts:
        try:
            drawn = _chart(spec, lang)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue
        if isinstance(drawn, Figure):
            charts.append(drawn)
        elif drawn is not None:
            facts.append(drawn)
    for said in declared_facts:
        try:
            facts.append(_fact(said, lang))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue
    # the grader's own figures, the same for every kind
    if (ms := _num(metrics, "sandbox_ms")) is not None:
        facts.append((_("Running your code"), seconds(ms)))
    if (ms := _num(metrics, "check_ms")) is not None:
        facts.append((_("Checking it"), seconds(ms)))
    if device := metrics.get("device"):
        facts.append((_("Device"), str(device).upper()))
    return Figures(charts, facts)
