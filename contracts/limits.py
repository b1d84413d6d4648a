"""An exercise's limits: what its exercise.yaml may set, checked, and what the sandbox applies."""

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Limits:
    """An exercise's limits, as its exercise.yaml sets them (validated) and as the sandbox
    applies them: one type from the file to the launcher."""

    # int | float: a whole number stays one (8, not 8.0), as the timeout message quotes it
    wall_seconds: int | float = Field(default=60, gt=0, le=600)
    cpu_seconds: int = Field(default=60, gt=0, le=600)
    memory_mb: int = Field(default=3072, ge=256, le=65536)  # the sandbox's cgroup, or its address space
    code_kb: int = Field(default=64, gt=0, le=1024)  # refused before running, above this
    output_kb: int = Field(default=64, gt=0, le=1024)  # the learner's prints kept
