from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from app.security import MAX_ID, TEXT_PATTERN
from app.submissions.models import Mode, Status
from contracts.verdict import Verdict

SubmissionId = Annotated[int, Path(ge=1, le=MAX_ID, description="The id from `POST …/submissions`")]


class SubmissionIn(BaseModel):
    code: str = Field(description="The learner's Python file, as text", pattern=TEXT_PATTERN)
    mode: Literal["submit", "run"] = Field(
        default="submit", description="`submit` grades; `run` only runs the code on the exercise's data"
    )


class SubmissionCreated(BaseModel):
    id: int
    status: Status


class SubmissionOut(BaseModel):
    id: int
    exercise: str
    mode: Mode
    status: Status
    queue_position: int | None = Field(description="1 = next to be graded; null unless queued")
    verdict: Verdict | None = Field(
        description="The verdict once final; null before, and for a cancelled submission"
    )
