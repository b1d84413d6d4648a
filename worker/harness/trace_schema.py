"""The trace: what a sandboxed run reports, and the one schema both sides hold it to.

The harness writes it (``runtime.write_trace``); the worker reads it with ``parse`` before any
check looks at it. Everything in it passed through the learner's process, so the worker treats
it as untrusted input: strict JSON (no NaN or Infinity), a size cap, a nesting cap, a cap on the
number of values, finite numbers only, and the fields every check relies on, typed. A trace that
breaks any of this raises ``Invalid``; the learner is told their program interfered with the
measurements. Standard library only: the harness imports it inside the sandbox.

    {"version": 1, "kind": str, "outcome": "ok" | "error",
     "error": null | {"phase": str, "type": str, "message": str, "traceback": [frame…], …},
     "data": <the kind's own measurements: any JSON within the caps>,
     "output": str, "output_dropped": int >= 0, "timings": {str: finite number >= 0},
     "death": absent | {"how": "signal" | "exit", "number": int}}

``death``: the learner's program ended without reporting (the supervisor saw how); the worker
reads the cause from it as it would from a process's own end.
"""

import json
import math
from typing import Any

VERSION = 1
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32  # the kinds' data nests a few levels
MAX_VALUES = 2_000_000  # every list item, object member and scalar counted once
MAX_STRING = 256 * 1024  # one string (the learner's captured output is the longest)
OUTCOMES = ("ok", "error")
# a list of records (lists or objects: events, snapshots, ranges, points, items…) holds at most
# this many, the most any supervisor or harness keeps (supervise.MAX_EVENTS); per kind, tighter
# caps by the member's name, the harness's own. The checks' work grows with these lists: capped
# here, before any check sees them, a flood is refused as a broken trace, at once.
MAX_RECORDS = 4096
KIND_RECORDS = {
    "phases": {"runs": 16, "ranges": 400},
    "gputrace": {"runs": 12},
    "timing": {"runs": 4},
    "chunked": {"calls": 2000},
}


class Invalid(ValueError):
    """The trace breaks the schema; the message says how (for the worker's log)."""


def _refuse_constant(name: str) -> float:
    raise Invalid(f"non-finite number {name}")


def _walk(value: object, caps: dict[str, int]) -> None:
    """Depth, count, string sizes, records per list (``caps`` by member name, else
    ``MAX_RECORDS``) and finiteness of every value, without recursion."""
    stack: list[tuple[object, int, str]] = [(value, 1, "")]
    seen = 0
    while stack:
        item, depth, name = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise Invalid(f"more than {MAX_VALUES} values")
        if depth > MAX_DEPTH:
            raise Invalid(f"nested deeper than {MAX_DEPTH}")
        if isinstance(item, dict):
            for key, member in item.items():
                if len(key) > MAX_STRING:
                    raise Invalid("a key too long")
                stack.append((member, depth + 1, key))
        elif isinstance(item, list):
            cap = caps.get(name, MAX_RECORDS)
            if len(item) > cap and any(isinstance(member, list | dict) for member in item):
                raise Invalid(f"{len(item)} records in {name or 'a list'} (at most {cap})")
            stack.extend((member, depth + 1, name) for member in item)
        elif isinstance(item, str):
            if len(item) > MAX_STRING:
                raise Invalid(f"a string of {len(item)} characters")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Invalid("a non-finite number")
        elif not (item is None or isinstance(item, bool | int)):
            raise Invalid(f"a value of type {type(item).__name__}")


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise Invalid(what)


def _frame(frame: object) -> None:
    _expect(isinstance(frame, dict), "a traceback frame that is not an object")
    assert isinstance(frame, dict)
    _expect(
        isinstance(frame.get("line"), int) and not isinstance(frame.get("line"), bool),
        "a frame without a line number",
    )
    _expect(
        isinstance(frame.get("function", ""), str) and isinstance(frame.get("code", ""), str),
        "a frame with a non-text function or code",
    )


def _error(error: object) -> None:
    _expect(isinstance(error, dict), "error is not an object")
    assert isinstance(error, dict)
    for key in ("phase", "type", "message"):
        _expect(isinstance(error.get(key, ""), str), f"error.{key} is not text")
    frames = error.get("traceback", [])
    _expect(isinstance(frames, list), "error.traceback is not a list")
    for frame in frames:
        _frame(frame)
    line = error.get("line")
    _expect(
        line is None or (isinstance(line, int) and not isinstance(line, bool)), "error.line is not a number"
    )


def validate(trace: object) -> dict[str, Any]:
    """``trace`` itself if it keeps the schema (see the module's docstring); else ``Invalid``."""
    kind = trace.get("kind") if isinstance(trace, dict) else None
    _walk(trace, KIND_RECORDS.get(kind, {}) if isinstance(kind, str) else {})
    _expect(isinstance(trace, dict), "the trace is not an object")
    assert isinstance(trace, dict)
    _expect(trace.get("version") == VERSION, "unknown version")
    _expect(isinstance(trace.get("kind"), str), "kind is not text")
    _expect(trace.get("outcome") in OUTCOMES, "unknown outcome")
    if trace.get("error") is not None:
        _error(trace["error"])
    _expect(trace["outcome"] == "ok" or trace.get("error") is not None, "an error outcome without error")
    _expect(isinstance(trace.get("output", ""), str), "output is not text")
    dropped = trace.get("output_dropped", 0)
    _expect(
        isinstance(dropped, int) and not isinstance(dropped, bool) and dropped >= 0,
        "output_dropped is not a count",
    )
    death = trace.get("death")
    if death is not None:
        _expect(
            isinstance(death, dict)
            and death.get("how") in ("signal", "exit")
            and isinstance(death.get("number"), int)
            and not isinstance(death.get("number"), bool),
            "death is not a signal or exit number",
        )
    timings = trace.get("timings", {})
    _expect(isinstance(timings, dict), "timings is not an object")
    for value in timings.values():
        _expect(
            isinstance(value, int | float) and not isinstance(value, bool) and value >= 0,
            "a timing that is not a non-negative number",
        )
    return trace


def parse(raw: bytes, limit: int = MAX_BYTES) -> dict[str, Any]:
    """The trace in ``raw``, validated; ``Invalid`` when it is not one."""
    if len(raw) > limit:
        raise Invalid(f"{len(raw)} bytes (limit {limit})")
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise Invalid(f"nested deeper than {MAX_DEPTH}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Invalid(f"not JSON: {str(exc)[:200]}") from None
    return validate(value)


def dumps(trace: dict[str, Any]) -> str:
    """The trace as the harness writes it: strict JSON, compact."""
    return json.dumps(trace, allow_nan=False, separators=(",", ":"))
