from typing import Any, Literal

from pydantic import BaseModel, Field


class SubmissionIn(BaseModel):
    code: str = Field(description="The learner's Python file, as text")
    mode: Literal["submit", "run"] = Field(
        default="submit", description="`submit` grades; `run` only runs the code on the exercise's data")


class SubmissionCreated(BaseModel):
    id: int
    status: str


class SubmissionOut(BaseModel):
    id: int
    exercise: str
    mode: str
    status: str
    queue_position: int | None = Field(description="1 = next to be graded; null unless queued")
    verdict: dict[str, Any] | None = Field(description="The verdict object once final (DESIGN.md)")
