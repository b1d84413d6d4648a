"""What grading needs of an exercise: its folder, its entry point, its check (kind and
parameters) and its limits, read from `lessons/<NN>-<slug>/exercises/<slug>/exercise.yaml`.

The worker reads only this (`load_exercises`): no lesson text, no Markdown, no Pygments. The
web's course (app/lessons/course.py) reads the same file whole, strictly (its texts, hints and
`taught_in` too), and its `Exercise` is this one with the page's parts added, so whatever grades
takes either. A problem raises ContentError with a one-line message naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from contracts.limits import Limits

LESSON_DIR = re.compile(r"^(\d{2})-([a-z0-9]+(?:-[a-z0-9]+)*)$")
SLUG = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
EXERCISE_FILE = "exercise.yaml"
M = TypeVar("M", bound=BaseModel)
# libyaml's parser when PyYAML was built with it: ten times faster at start-up
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Slug = Annotated[str, StringConstraints(pattern=SLUG)]
Entry = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class ContentError(Exception):
    """A lesson file is broken; str() is one line that names the file and the problem."""


class CheckFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    kind: Slug
    params: dict[str, Any] = Field(default_factory=dict)


class GradedFile(BaseModel):
    """The part of exercise.yaml that grading reads; the rest (texts, hints) is the page's."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    entry: Entry
    check: CheckFile
    limits: Limits = Field(default_factory=Limits)


@dataclass(frozen=True)
class Exercise:
    id: str  # <lesson-slug>/<exercise-slug>
    lesson: str
    slug: str
    path: Path  # its folder: solution.py, mistakes/, the kind's job inputs
    entry: str
    check_kind: str
    check_params: dict[str, Any]
    limits: Limits


def graded_fields(spec: GradedFile, folder: Path, lesson: str) -> dict[str, Any]:
    """An Exercise's fields from the file's graded part (app/lessons/course.py adds its own)."""
    return {
        "id": f"{lesson}/{folder.name}",
        "lesson": lesson,
        "slug": folder.name,
        "path": folder,
        "entry": spec.entry,
        "check_kind": spec.check.kind,
        "check_params": dict(spec.check.params),
        "limits": spec.limits,
    }


class Catalog(Protocol):
    """Where a grader finds an exercise by id: `Exercises`, or the web's whole course."""

    @property
    def exercises(self) -> Sequence[Exercise]: ...

    def exercise(self, exercise_id: str) -> Exercise | None: ...


@dataclass(frozen=True)
class Exercises:
    exercises: tuple[Exercise, ...]

    def exercise(self, exercise_id: str) -> Exercise | None:
        return next((ex for ex in self.exercises if ex.id == exercise_id), None)


def exercise_folders(lesson: Path) -> Iterator[Path]:
    """A lesson folder's exercise folders, in order."""
    root = lesson / "exercises"
    if root.is_dir():
        yield from sorted(p for p in root.iterdir() if p.is_dir())


def load_exercises(root: Path) -> Exercises:
    """Every exercise of the course under `root` (lessons/), as grading needs it."""
    if not root.is_dir():
        raise ContentError(f"{root}: lessons folder not found")
    found = []
    for lesson in sorted(p for p in root.iterdir() if p.is_dir()):
        match = LESSON_DIR.match(lesson.name)
        if not match:
            raise ContentError(f"{lesson}: lesson folders are named NN-slug (e.g. 02-gradient-accumulation)")
        for folder in exercise_folders(lesson):
            spec = load_yaml(folder / EXERCISE_FILE, GradedFile)
            found.append(Exercise(**graded_fields(spec, folder, match[2])))
    return Exercises(tuple(found))


# ---------------------------------------------------------------- reading a file, one-line errors


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContentError(f"{path}: missing") from None
    except UnicodeDecodeError as e:
        raise ContentError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None


def parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ContentError(f"{path}:{line} invalid YAML: {problem}") from None


def load_yaml(path: Path, model: type[M]) -> M:
    return validate(path, model, parse_yaml(path, read_text(path)))


def validate(path: Path, model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        raise ContentError(f"{path}: {where}: {err['msg']}") from None
