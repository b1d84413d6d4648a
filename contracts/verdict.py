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
from collections.abc import Iterable, Mapping
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
Unit = Literal["bytes", "times", "count"]


class BarRecord(TypedDict):
    label: str  # catalogue key figure.<chart>.<label>: the bar's name
    kind: BarKind  # how it is drawn: the learner's, what it is measured against, the naive way
    value: float


class ChartRecord(TypedDict):
    """A bar chart a check kind declares in its metrics (``metrics["charts"]``), drawn by the
    page for any kind: its texts are the kind's own (figure.<id>.title, .note, and .summary,
    which quotes each bar's value by its label), its numbers written in ``unit``."""

    id: str
    unit: Unit
    bars: list[BarRecord]


def chart(id: str, unit: Unit, bars: Iterable[tuple[str, BarKind, float]]) -> ChartRecord:
    """A declared bar chart (``ChartRecord``) for a kind's metrics, under ``"charts"``."""
    return {"id": id, "unit": unit, "bars": [{"label": b[0], "kind": b[1], "value": b[2]} for b in bars]}


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
        description="Bar charts the kind declares: `{id, unit, bars: [{label, kind, value}]}`",
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
