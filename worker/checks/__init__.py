"""Trusted judging of harness traces, one module per check kind.

A kind is ``worker/harness/<kind>.py`` (records, in the sandbox) plus
``worker/checks/<kind>.py`` (judges, here). The checks module provides::

    evaluate(params: dict, data: dict, device: str) -> Evaluation
    diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None
    prepare(params: dict, device: str) -> None  # optional: the reference, before any job

Texts are not written here: checks name message keys of ``messages.yaml`` and the
values to quote, and ``app.submissions.messages`` renders them in the learner's language.
"""

import importlib
import re
import threading
from dataclasses import dataclass, field
from types import ModuleType


@dataclass(frozen=True)
class Check:
    name: str  # catalogue key: check.<name>.name
    passed: bool
    message: str  # catalogue key of the message
    values: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Diagnosis:
    id: str  # catalogue keys: diagnosis.<id>.title / .explanation
    values: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    checks: list[Check]
    diagnosis: Diagnosis | None
    metrics: dict

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class Interfered(Exception):
    """What the learner's process reported disagrees with what the sandbox's supervisor observed
    (or the supervisor saw the protocol broken): no verdict can rest on the run. Grading answers
    it as ``error.interfered``, as any failure to judge a trace."""


def observed(data: dict) -> dict:
    """The supervisor's observations in a trace's data (``worker/harness/supervise.py``); raises
    ``Interfered`` when they are missing or the supervisor saw interference."""
    seen = data.get("observed") if isinstance(data, dict) else None
    if not isinstance(seen, dict):
        raise Interfered("no observations in the trace")
    if seen.get("interfered"):
        raise Interfered(str(seen["interfered"]))
    return seen


def snapshots(seen: dict, label: str) -> list:
    """The parameters the supervisor read at each ``label`` sync, in order."""
    return [seen["snapshots"][e[3]] for e in seen["events"] if e[0] == label and e[3] >= 0]


def agree(reported: object, seen: object, what: str) -> None:
    """``Interfered`` unless a reported value is exactly what was observed (both came from the
    same memory at the same moment: any difference was made on purpose)."""
    if reported != seen:
        raise Interfered(f"the reported {what} differ from the observed ones")


# Scenarios seed torch's global generator: a reference built in one grading thread must not
# be interleaved with another thread's seeding. Hold this while building one.
SEEDING = threading.RLock()

KIND_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def kind_module(kind: str) -> ModuleType:
    """The checks module of ``kind`` (ValueError if there is none)."""
    if not KIND_NAME.match(kind):
        raise ValueError(f"bad check kind {kind!r}")
    try:
        return importlib.import_module(f"{__name__}.{kind}")
    except ModuleNotFoundError as exc:
        raise ValueError(f"unknown check kind {kind!r}") from exc
