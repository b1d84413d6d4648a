"""What a check kind's module judges a run with, in one import (issue 47: the kinds that read a
memory run repeated these nine names): ``from worker.checks.kit import *``. The verdict's parts
(``Check``, ``Diagnosis``, ``Evaluation``, ``Interfered``), the lock a kind's references are
computed under (``SEEDING``), and the readers of what the sandbox's supervisor observed
(``observed``, ``snapshots``, ``kernel_memory``, ``tensors``)."""

from worker.checks import (
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    Interfered,
    kernel_memory,
    observed,
    snapshots,
    tensors,
)

__all__ = [
    "SEEDING",
    "Check",
    "Diagnosis",
    "Evaluation",
    "Interfered",
    "kernel_memory",
    "observed",
    "snapshots",
    "tensors",
]
