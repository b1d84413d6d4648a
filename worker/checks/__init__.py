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
