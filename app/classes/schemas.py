from typing import Annotated, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from app.security import MAX_ID, TEXT_PATTERN

ClassId = Annotated[int, Path(ge=1, le=MAX_ID, description="The id from `POST /api/classes`")]
CellStatus = Literal["passed", "tried", "not-started"]


class ClassIn(BaseModel):
    name: str = Field(
        min_length=1, max_length=120, pattern=r"^[^\x00]*[^\x00\s][^\x00]*$", examples=["DL module 2026"]
    )
    course: str = Field(
        default="", max_length=120, pattern=TEXT_PATTERN, description="What the class is part of (optional)"
    )


class ClassCreated(BaseModel):
    id: int
    join_code: str = Field(
        description="Learners join with it; renewing it on the class page ends the old one"
    )
    join_url: str = Field(description="The join page: it says what the teachers will see before joining")


class JoinIn(BaseModel):
    code: str = Field(min_length=1, max_length=40, pattern=TEXT_PATTERN, examples=["K7QW3MPR2D"])
    name: str = Field(
        default="",
        max_length=80,
        pattern=TEXT_PATTERN,
        description="How the teachers will see this learner; by default the e-mail address's first part",
    )


class JoinedOut(BaseModel):
    id: int
    name: str = Field(description="The class's name")
    role: Literal["teacher", "learner"]


class ClassCellOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: CellStatus
    attempts: int = Field(description="Graded attempts, as the learner numbers them (runs are none)")


class ClassLearnerOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    name: str
    exercises: dict[str, ClassCellOut] = Field(description="By exercise id, every exercise of the course")


class ClassExerciseOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    passed: int = Field(description="Learners who passed it")
    attempted: int = Field(description="Learners who sent code for it (passed included)")
    mistakes: dict[str, int] = Field(
        description="Diagnosis id → learners whose graded code it was named in, most common first"
    )


class ClassReportOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    course: str
    learners: list[ClassLearnerOut]
    exercises: dict[str, ClassExerciseOut]
    questions: dict[str, dict[str, int]] = Field(
        description="`<lesson>/<question>` → each wrong option chosen → learners who chose it"
    )
