"""Trusted judging of harness traces, one module per check kind.

A kind is ``worker/harness/<kind>.py`` (records, in the sandbox) plus
``worker/checks/<kind>.py`` (judges, here), which is a ``Kind``: ``evaluate`` and
``diagnose_error``, and optionally ``prepare`` (the reference, before any job), ``summarize``
(what a plain run did, for the ``run`` mode) and ``job_inputs`` (data the harness needs that the
sandbox cannot read, such as the lesson's files: merged into the job's params by the grader).

Texts are not written here: checks name message keys of ``messages.yaml`` and the
values to quote, and ``contracts.messages`` renders them in the learner's language.
"""

import contextlib
import ctypes
import importlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contracts.messages import Phrase


@dataclass(frozen=True)
class Check:
    name: str  # catalogue key: check.<name>.name
    passed: bool
    message: str  # catalogue key of the message
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Diagnosis:
    id: str  # catalogue keys: diagnosis.<id>.title / .explanation
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    checks: list[Check]
    diagnosis: Diagnosis | None
    metrics: dict[str, Any]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class Interfered(Exception):
    """What the learner's process reported disagrees with what the sandbox's supervisor observed
    (or the supervisor saw the protocol broken): no verdict can rest on the run. Grading answers
    it as ``error.interfered``, quoting what was observed: ``interfered.<key>`` of
    messages.yaml with ``values`` (a fact, in the learner's language, never a charge)."""

    def __init__(self, key: str, values: dict[str, Any] | None = None, detail: str = "") -> None:
        super().__init__(detail or key)
        self.key, self.values = key, values or {}


# what the supervisor notes in ``observed["interfered"]`` (worker/harness/link.py
# ``Interference``, observer.py ``Observer.problem``): a list of ``{"key", "values"}``, the first
# the one the learner is told, as ``interfered.<key>`` with the values it observed; a key not
# among these (the trace is parsed, not believed) reads ``interfered.other``
SUPERVISOR_KEYS = frozenset({"protocol", "shape", "processes", "meter_blind", "meter_backwards"})


def _scalars(values: object) -> dict[str, Any]:
    """The observed values a note carries: names to ints or short strings, nothing else."""
    if not isinstance(values, dict):
        return {}
    return {
        k: v
        for k, v in values.items()
        if isinstance(k, str)
        and ((isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and len(v) <= 40))
    }


def observed(data: dict[str, Any]) -> dict[str, Any]:
    """The supervisor's observations in a trace's data (``worker/harness/supervise.py``); raises
    ``Interfered`` when they are missing or the supervisor saw interference."""
    seen = data.get("observed") if isinstance(data, dict) else None
    if not isinstance(seen, dict):
        raise Interfered("missing", detail="no observations in the trace")
    notes = seen.get("interfered")
    if notes:
        first = notes[0] if isinstance(notes, list) and isinstance(notes[0], dict) else {}
        key = first.get("key")
        values = _scalars(first.get("values"))
        key = key if isinstance(key, str) and key in SUPERVISOR_KEYS else "other"
        raise Interfered(key, values, detail=f"the supervisor noted {key} {values}")
    return seen


def snapshots(seen: dict[str, Any], label: str) -> list[Any]:
    """The parameters the supervisor read at each ``label`` sync, in order."""
    return [seen["snapshots"][e[3]] for e in seen["events"] if e[0] == label and e[3] >= 0]


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def agree(reported: object, seen: object, what: str) -> None:
    """``Interfered`` unless a reported value is exactly what was observed (both came from the
    same memory at the same moment: no run of the harness's own code makes them differ).
    ``what``: ``parameters`` (a step's or the final ones), ``memory`` (a meter's peaks), or
    a count's unit (``steps``, ``forwards``, ``calls``, ``events``): the count is quoted."""
    if reported == seen:
        return
    detail = f"the reported {what} differ from the observed ones"
    if what in ("parameters", "memory"):
        raise Interfered(what, detail=detail)
    values: dict[str, Any] = {"unit": Phrase(f"interfered.unit.{what}")}
    if _count(reported) and _count(seen):
        values |= {"reported": reported, "seen": seen}
        raise Interfered("count", values, detail)
    raise Interfered("counts", values, detail)


WALL_FACTOR = 8  # budget(): wall time allowed per second of CPU time
BUDGET_POLL_SECONDS = 0.1


class OverBudget(Exception):
    """Judging a trace took longer than its budget (``budget``)."""


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Raise ``OverBudget`` in this thread once the block has used ``seconds`` of this thread's
    CPU time (what judging this trace costs, however busy the machine is: a wall clock made
    correct loops overrun on a loaded worker), or ``WALL_FACTOR`` times as long on the wall
    clock (a block that waits rather than computes). A watcher thread sets it as this thread's
    asynchronous exception, which Python raises at the next bytecode (a long call into C ends
    first). Nothing is left pending once the block is left."""
    thread = threading.get_ident()
    clock = time.pthread_getcpuclockid(thread)
    cpu_start, wall_start = time.clock_gettime(clock), time.monotonic()
    lock, state = threading.Lock(), {"inside": True, "fired": False}
    left = threading.Event()

    def over() -> bool:
        used = time.clock_gettime(clock) - cpu_start
        return used > seconds or time.monotonic() - wall_start > seconds * WALL_FACTOR

    def watch() -> None:
        while not left.wait(min(BUDGET_POLL_SECONDS, seconds / 4)):
            with lock:
                if not state["inside"]:
                    return
                if over():
                    state["fired"] = True
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(thread), ctypes.py_object(OverBudget)
                    )
                    return

    watcher = threading.Thread(target=watch, name="treino-check-budget", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            state["inside"] = False
            if state["fired"]:  # set, perhaps not raised yet: not to be raised after the block
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), None)
        left.set()


# Scenarios seed torch's global generator: a reference built in one grading thread must not
# be interleaved with another thread's seeding. Hold this while building one.
SEEDING = threading.RLock()

KIND_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


# ``params``: the exercise's check parameters (exercise.yaml); ``data``: the trace's.
Prepare = Callable[[dict[str, Any], str], None]  # (params, device): build the reference
Summarize = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]  # (params, data): metrics


@runtime_checkable
class Kind(Protocol):
    """What every checks module provides. ``prepare`` (a ``Prepare``) and ``summarize`` (a
    ``Summarize``) are optional: callers look them up with ``getattr``."""

    def evaluate(self, params: dict[str, Any], data: dict[str, Any], device: str) -> Evaluation: ...

    def diagnose_error(
        self, params: dict[str, Any], data: dict[str, Any] | None, error: dict[str, Any]
    ) -> Diagnosis | None: ...


def kind_module(kind: str) -> Kind:
    """The checks module of ``kind`` (ValueError if there is none, or it is not a ``Kind``)."""
    if not KIND_NAME.match(kind):
        raise ValueError(f"bad check kind {kind!r}")
    try:
        module = importlib.import_module(f"{__name__}.{kind}")
    except ModuleNotFoundError as exc:
        raise ValueError(f"unknown check kind {kind!r}") from exc
    if not isinstance(module, Kind):
        raise ValueError(f"worker/checks/{kind}.py lacks evaluate or diagnose_error")
    return module
