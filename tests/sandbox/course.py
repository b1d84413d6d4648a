"""The course as the sandbox tests read it: an exercise by its id, and its solution's text."""

import functools
from pathlib import Path

from app.config import get_settings
from contracts.exercise import Exercise, load_exercises


@functools.cache
def find_exercise(exercise_id: str) -> Exercise:
    """The exercise as grading reads it (`treino check`'s way: its exercise.yaml alone)."""
    found = load_exercises(get_settings().lessons_dir).exercise(exercise_id)
    assert found is not None, exercise_id
    return found


def solution_text(exercise: Exercise) -> str:
    return (Path(exercise.path) / "solution.py").read_text(encoding="utf-8")
