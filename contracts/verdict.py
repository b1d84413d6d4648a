"""The verdict, in its two forms (docs/architecture.md, "Contracts").

- The **record** (``Record``, version 2) is what the worker writes on the submission's row: message
  keys of ``messages.yaml`` and the values they quote, never texts. ``record`` and ``trouble``
  build it; the worker's grader imports them.
- The **verdict** (``Verdict``, version 1) is what a reader gets: ``render(record, lang)`` turns a
  record into texts in the reader's language, when it is read; `treino check --json` prints it and
  the API returns it. A row written before records existed holds a version-1 verdict, already
  rendered: ``render`` passes it through.
"""

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field

from contracts.languages import language
from contracts.messages import decode, encode
from contracts.messages import render as render_text

VerdictStatus = Literal["passed", "failed", "error", "timeout", "rejected"]
STATUSES: tuple[VerdictStatus, ...] = get_args(VerdictStatus)
Reason = Literal["worker-trouble", "grader-crashed", "exercise-gone", "verdict-refused"]
REASONS: tuple[Reason, ...] = get_args(Reason)
RECORD_VERSION: Literal[2] = 2
VERDICT_VERSION: Literal[1] = 1
MAX_BYTES = 256 * 1024  # a sealed record, as JSON


# ---------------------------------------------------------------- the record (stored)


class CheckRecord(TypedDict):
    name: str  # catalogue key check.<name>.name
    passed: bool
    message: str  # catalogue key
    values: dict[str, Any]  # encoded (messages.encode)
    line: NotRequired[int]  # the learner's line an error check points at


class DiagnosisRecord(TypedDict):
    id: str  # catalogue keys diagnosis.<id>.title / .explanation
    values: dict[str, Any]


class Record(TypedDict):
    version: Literal[2]
    exercise: str
    status: VerdictStatus
    diagnosis: DiagnosisRecord | None
    checks: list[CheckRecord]
    metrics: dict[str, Any]
    output: str
    reason: NotRequired[Reason]
    mode: NotRequired[Literal["run"]]


BarKind = Literal["yours", "reference", "naive"]
# how a chart's numbers are written: bytes (B, KiB, MiB), a ratio (4.00×), a count (1,024),
# milliseconds (2.30 ms), a fine value (1.0873: four decimals, as losses are read)
Unit = Literal["bytes", "times", "count", "ms", "fine"]
# where bars start: at zero (the ratios are the point), or just below the smallest value (small
# differences of large values show; the page says where the bars start)
Scale = Literal["zero", "lowest"]
# when the chart is drawn: always, or only where it shows a difference (else it is said as a
# fact): some two values differ by more than one part in a thousand ("differ"), at all
# ("unequal"), or as the learner's language writes them ("texts")
Shown = Literal["always", "differ", "unequal", "texts"]


class BarRecord(TypedDict):
    label: str  # message key of the bar's name (a chart of the first form: figure.<chart>.<label>)
    kind: BarKind  # how it is drawn: the learner's, what it is measured against, the naive way
    value: float | None  # None: no finite value (written "—", no bar)
    name: NotRequired[str]  # a name shown as it is (a dtype's), instead of the label's text
    values: NotRequired[dict[str, Any]]  # what the label's text quotes (encoded)
    low: NotRequired[float]  # the spread of a median: drawn over the bar, written under it
    high: NotRequired[float]


class FactRecord(TypedDict):
    """A figure said, not drawn: a label (message key) and either a number in ``unit`` or a text
    (message key) with the values it quotes."""

    label: str
    unit: NotRequired[Unit]
    value: NotRequired[float]
    text: NotRequired[str]
    values: NotRequired[dict[str, Any]]


class ChartRecord(TypedDict):
    """A bar chart a check kind declares in its metrics (``metrics["charts"]``), drawn by the
    page for any kind, each chart a table with its summary sentence.

    Its texts are message keys of the kind's own catalogue (messages.d/<kind>.yaml): ``title``,
    ``note`` and ``summary`` (each a list of keys, joined by a space; empty: none), quoting
    ``values`` and each bar's value by the last part of its label's key. Where ``shown`` says the
    bars show no difference, the chart is said as a fact: its title, and the text ``fact`` (or the
    first bar's value). A chart of the first form (no ``title``) has keys figure.<id>.title,
    .note, .summary and figure.<id>.<label>."""

    id: str  # the figure on the page (figure-<id>)
    unit: Unit
    bars: list[BarRecord]
    title: NotRequired[str]
    note: NotRequired[list[str]]
    summary: NotRequired[list[str]]
    values: NotRequired[dict[str, Any]]  # encoded (messages.encode)
    scale: NotRequired[Scale]
    shown: NotRequired[Shown]
    fact: NotRequired[str]


def bar(label: str, kind: str, value: float | None, **more: Any) -> BarRecord:
    """One bar: ``more`` may give ``name``, ``values`` (encoded here), ``low`` and ``high``."""
    out: BarRecord = {"label": label, "kind": kind, "value": value}  # type: ignore[typeddict-item]
    if "values" in more:
        more = {**more, "values": encode(more["values"])}
    out.update(more)  # type: ignore[typeddict-item]
    return out


def chart(
    id: str,
    unit: str,
    bars: Iterable[tuple[str, str, float | None] | BarRecord],
    texts: str | None = None,
    **more: Any,
) -> ChartRecord:
    """A declared bar chart (``ChartRecord``) for a kind's metrics, under ``"charts"``: each bar
    a ``BarRecord`` or (label, kind, value). Without ``texts``, of the first form (figure.<id>.*
    keys, as chunked-loss stores them); with it, its keys are ``texts``.title, ``texts``.note,
    ``texts``.summary, unless ``more`` names others (``note``, ``summary``: a key or a list;
    ``values`` encoded here). A unit or a kind of bar the page does not know raises ValueError."""
    drawn = [b if isinstance(b, dict) else {"label": b[0], "kind": b[1], "value": b[2]} for b in bars]
    if unit not in get_args(Unit) or any(b["kind"] not in get_args(BarKind) for b in drawn):
        raise ValueError(f"chart {id}: a unit or a kind of bar the page does not draw")
    out: ChartRecord = {"id": id, "unit": unit, "bars": drawn}  # type: ignore[typeddict-item]
    if texts is None:
        return out
    out["title"] = more.pop("title", f"{texts}.title")
    for part in ("note", "summary"):
        keys = more.pop(part, f"{texts}.{part}")
        out[part] = [keys] if isinstance(keys, str) else list(keys)
    if "values" in more:
        more["values"] = encode(more["values"])
    out.update(more)  # type: ignore[typeddict-item]
    return out


def fact(label: str, value: float | None = None, unit: str = "count", **said: Any) -> FactRecord:
    """A figure said as a fact: ``value`` in ``unit``, or ``said`` as ``text`` (a key) and its
    ``values``."""
    if "text" in said:
        return {"label": label, "text": said["text"], "values": encode(said.get("values") or {})}
    return {"label": label, "unit": unit, "value": float(value or 0)}  # type: ignore[typeddict-item]


def clear_winner(timings: Sequence[tuple[float, float, float]]) -> int | None:
    """Which of these (median, low, high) timings was clearly the fastest: the one with the
    lowest median, if the top of its spread is below the bottom of every other's; None when the
    spreads overlap (the difference is within the noise) or there is nothing to beat."""
    if len(timings) < 2:
        return None
    best = min(range(len(timings)), key=lambda i: timings[i][0])
    top = timings[best][2]
    return best if all(top < low for i, (_m, low, _h) in enumerate(timings) if i != best) else None


def declared(metrics: Mapping[str, Any]) -> tuple[list[ChartRecord], list[FactRecord]]:
    """The charts and facts a verdict's metrics declare. Metrics stored before their kind
    declared any (neither ``charts`` nor ``facts``) are read as declared once, by
    ``contracts.old_charts``: an old submission keeps its figures."""
    if "charts" in metrics or "facts" in metrics:
        return list(metrics.get("charts") or []), list(metrics.get("facts") or [])
    from contracts import old_charts

    return old_charts.declared(metrics)


def check_record(name: str, passed: bool, message: str, values: dict[str, Any]) -> CheckRecord:
    out: CheckRecord = {"name": name, "passed": passed, "message": message, "values": encode(values)}
    line = values.get("line")
    if message.startswith("error.") and isinstance(line, int) and line > 0:
        out["line"] = line  # the editor marks it
    return out


def record(
    exercise: str,
    status: VerdictStatus,
    checks: Iterable[CheckRecord] = (),
    diagnosis: tuple[str, dict[str, Any]] | None = None,
    metrics: dict[str, Any] | None = None,
    output: str = "",
) -> Record:
    return {
        "version": RECORD_VERSION,
        "exercise": exercise,
        "status": status,
        "diagnosis": None if diagnosis is None else {"id": diagnosis[0], "values": encode(diagnosis[1])},
        "checks": list(checks),
        "metrics": metrics or {},
        "output": output,
    }


def trouble(exercise: str, reason: Reason) -> Record:
    """The record of a job that could not be judged for a reason of ours, not the learner's."""
    return {**record(exercise, "error"), "reason": reason}


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _cut(value: Any, limit: int) -> Any:
    """Strings inside ``value`` cut to ``limit`` characters."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value]
    return value


def _size(rec: Record) -> int:
    return len(json.dumps(rec, allow_nan=False))


def seal(rec: Record, output_kb: int) -> Record:
    """The record as it may be stored and sent: strict JSON (a learner's NaN loss becomes null,
    never a value PostgreSQL refuses) and at most MAX_BYTES (the output and the quoted values,
    often the learner's own error message, are cut first)."""
    rec = _finite(rec)
    if _size(rec) > MAX_BYTES:
        limit = min(output_kb, 16) * 1024
        output = rec["output"]
        rec["output"] = output if len(output) <= limit else output[:limit] + "\n[…]"
        for check in rec["checks"]:
            check["values"] = _cut(check["values"], 2048)
    if _size(rec) > MAX_BYTES:
        rec = {**rec, "checks": rec["checks"][:20], "metrics": {}}
    return rec


# ---------------------------------------------------------------- the verdict (read)


class Diagnosis(BaseModel):
    id: str = Field(description="The known mistake, e.g. `loss-not-scaled`", examples=["loss-not-scaled"])
    title: str
    explanation: str = Field(description="Quotes the learner's own numbers")


class CheckResult(BaseModel):
    name: str
    status: Literal["passed", "failed"]
    message: str
    line: int | None = Field(default=None, description="The learner's line an error points at")


class Metrics(BaseModel):
    """What was measured. The keys depend on the exercise's kind of check; those below are the
    common ones, each present only where it applies."""

    model_config = ConfigDict(extra="allow")

    device: str | None = Field(default=None, description="`cpu` or `cuda`")
    isolation: str | None = Field(default=None, description="`bwrap`, or `process`: not isolated")
    sandbox_ms: float | None = None
    check_ms: float | None = None
    optimizer_steps: int | None = None
    reference_optimizer_steps: int | None = None
    update_ratio: float | None = Field(
        default=None, description="Learner's update ÷ the reference's (median over steps)"
    )
    peak_activation_bytes: int | None = None
    reference_peak_activation_bytes: int | None = None
    charts: list[dict[str, Any]] | None = Field(
        default=None,
        description="Bar charts the kind declares (`ChartRecord`): `{id, unit, bars: [{label, kind, "
        "value}], title, note, summary, values}`, its texts message keys",
    )
    facts: list[dict[str, Any]] | None = Field(
        default=None, description="Figures the kind says without a chart (`FactRecord`)"
    )


class Verdict(BaseModel):
    """A verdict as read: texts in the reader's language."""

    version: Literal[1]
    exercise: str = Field(examples=["gradient-accumulation/accumulate"])
    status: VerdictStatus = Field(
        description="`failed`: ran, wrong; `error`: did not run; `rejected`: bad input (too large, not text)"
    )
    diagnosis: Diagnosis | None = Field(description="null when passed or when no known mistake matches")
    checks: list[CheckResult]
    metrics: Metrics
    output: str = Field(description="The learner's stdout and stderr, capped")
    reason: Reason | None = Field(
        default=None, description="Set when grading failed for a reason of ours, e.g. `worker-trouble`"
    )
    mode: Literal["run"] | None = Field(default=None, description="`run`: run and measured, not graded")


def _say(key: str, lang: str, values: dict[str, Any] | None = None) -> str:
    """The text of a stored key, or the key itself where the catalogue no longer has it (or its
    placeholders changed) since the record was written: an old row must never break a page."""
    try:
        return render_text(key, lang, decode(values) if values else None)
    except (KeyError, IndexError, ValueError):
        return key


def _render_check(check: CheckRecord, lang: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": _say(f"check.{check['name']}.name", lang),
        "status": "passed" if check["passed"] else "failed",
        "message": _say(check["message"], lang, check["values"]),
    }
    if "line" in check:
        out["line"] = check["line"]
    return out


def render(stored: Mapping[str, Any], lang: str) -> dict[str, Any]:
    """The verdict of a stored record, its texts in ``lang`` (a version-1 verdict as it is)."""
    if stored.get("version") != RECORD_VERSION:
        return dict(stored)
    lang = language(lang)
    diagnosis = stored.get("diagnosis")
    out: dict[str, Any] = {
        "version": VERDICT_VERSION,
        "exercise": stored["exercise"],
        "status": stored["status"],
        "diagnosis": None
        if diagnosis is None
        else {
            "id": diagnosis["id"],
            "title": _say(f"diagnosis.{diagnosis['id']}.title", lang),
            "explanation": _say(f"diagnosis.{diagnosis['id']}.explanation", lang, diagnosis["values"]),
        },
        "checks": [_render_check(c, lang) for c in stored.get("checks", [])],
        "metrics": stored.get("metrics") or {},
        "output": stored.get("output", ""),
    }
    for key in ("reason", "mode"):
        if key in stored:
            out[key] = stored[key]
    return out
