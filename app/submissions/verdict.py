"""The verdict object (docs/architecture.md, "Contracts"): what `treino check --json` prints, what the
worker stores and what the API returns, as types."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

VerdictStatus = Literal["passed", "failed", "error", "timeout", "rejected"]


class Diagnosis(BaseModel):
    id: str = Field(description="The known mistake, e.g. `loss-not-scaled`", examples=["loss-not-scaled"])
    title: str
    explanation: str = Field(description="Quotes the learner's own numbers")


class CheckResult(BaseModel):
    name: str
    status: Literal["passed", "failed"]
    message: str


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
    update_ratio: float | None = Field(default=None, description="Learner's update ÷ the reference's "
                                                                 "(median over steps)")
    peak_activation_bytes: int | None = None
    reference_peak_activation_bytes: int | None = None


class Verdict(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: Literal[1]
    exercise: str = Field(examples=["gradient-accumulation/accumulate"])
    status: VerdictStatus = Field(description="`failed`: ran, wrong; `error`: did not run; "
                                              "`rejected`: bad input (too large, not text)")
    diagnosis: Diagnosis | None = Field(description="null when passed or when no known mistake matches")
    checks: list[CheckResult]
    metrics: Metrics
    output: str = Field(description="The learner's stdout and stderr, capped")
    reason: str | None = Field(default=None, description="Set when grading failed for a reason of "
                                                         "ours, e.g. `worker-trouble`")
