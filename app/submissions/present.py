"""How a submission reads on the page: its outcome in words, and when it was sent."""

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from babel.dates import format_timedelta
from jinja2 import Environment
from markupsafe import Markup, escape

from app.db import aware, utcnow
from app.i18n import current_lang, locale_name
from app.i18n import gettext as _
from app.lessons import markdown as md
from app.lessons.course import Course, Exercise, Lesson
from app.submissions.models import Mode, Status, Submission
from app.web import status_label
from contracts import messages
from contracts.verdict import render


def outcome_label(submission: Submission) -> str:
    """A run that ran "Ran" (nothing was graded); everything else as its status says."""
    if submission.mode == Mode.RUN and submission.status == Status.PASSED:
        return _("Ran")
    return status_label(submission.status)


def attempt_label(number: int, submission: Submission) -> str:
    """ "Attempt 3", or what a submission that is no attempt (services.Attempts) was."""
    if number:
        return _("Attempt %(n)d") % {"n": number}
    if submission.mode == Mode.RUN:
        return _("Run, not graded")
    return _("Not counted as an attempt")


def when(moment: datetime, now: datetime | None = None) -> str:
    """ "3 minutes ago", in the page's language."""
    delta = aware(moment) - (now or utcnow())
    if abs(delta.total_seconds()) < 45:
        return _("just now")
    return format_timedelta(delta, add_direction=True, locale=locale_name(current_lang()))


_CODE_SPAN = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> Markup:
    """Plain text (a hint) with its `code spans` shown as code; everything else escaped."""
    return Markup(_CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", str(escape(text))))


def markdown(text: str) -> Markup:
    """Course text (a hint) rendered as the lesson cards are: Markdown, raw HTML escaped."""
    return Markup(md.render_markdown(text))


def python_html(code: str) -> Markup:
    """Python source highlighted the way lesson code is (Pygments classes, no wrapper)."""
    return Markup(md.python_html(code))


@lru_cache(maxsize=64)
def _read_solution(path: Path, _mtime: float) -> str:
    return path.read_text(encoding="utf-8")


def solution(exercise: Exercise, lang: str | None = None) -> str:
    """The exercise's reference solution (re-read when the file changes), its comments and
    docstrings in ``lang`` where the folder has ``solution.<lang>.py``: the same program
    (tests/lessons/test_solutions.py), which only the English one is graded as."""
    folder = Path(exercise.path)
    path = folder / f"solution.{lang}.py"
    if not lang or not path.is_file():
        path = folder / "solution.py"
    return _read_solution(path, path.stat().st_mtime)


def pass_meaning(exercise: Exercise | None) -> str:
    """What a pass of this exercise's check kind means, its thresholds taken from the exercise:
    the text (``verdict.passed.<kind>``) names the exercise's own parameters (``{min_speedup}``,
    ``{budget}``), so a new kind needs nothing here."""
    key = f"verdict.passed.{exercise.check_kind}" if exercise else ""
    if key not in messages.catalogue():  # gone, or a kind without its words yet (a test asks for them)
        return messages.render("verdict.passed", current_lang())
    assert exercise is not None
    values = {k: v for k, v in exercise.check_params.items() if isinstance(v, int | float | str)}
    return messages.render(key, current_lang(), values)


def failing_line(verdict: dict) -> int | None:
    """The learner's line the verdict's error points at, if any."""
    for check in verdict.get("checks") or []:
        line = check.get("line") if isinstance(check, dict) else None
        if check.get("status") == "failed" and isinstance(line, int) and line > 0:
            return line
    return None


@dataclass(frozen=True)
class Place:
    """Where an exercise sits: its lesson, its number there, and what comes after it."""

    lesson: Lesson
    number: int
    total: int
    next_exercise: Exercise | None
    next_lesson: Lesson | None


def place(course: Course, exercise: Exercise) -> Place | None:
    lesson = course.lesson(exercise.lesson)
    if lesson is None or exercise not in lesson.exercises:
        return None
    i = lesson.exercises.index(exercise)
    later = lesson.exercises[i + 1 :]
    return Place(
        lesson, i + 1, len(lesson.exercises), later[0] if later else None, course.neighbours(lesson)[1]
    )


def verdict_of(submission: Submission) -> dict[str, Any]:
    """The submission's verdict with its texts in the reader's language (rendered now, from the
    message keys and values the worker stored), or {} while there is none."""
    return render(submission.verdict, current_lang()) if submission.verdict else {}


def iso(moment: datetime) -> str:
    return aware(moment).isoformat()


def install(env: Environment) -> None:
    env.globals.update(
        attempt_label=attempt_label, outcome_label=outcome_label, when=when, iso=iso, verdict_of=verdict_of
    )
    env.filters["python"] = python_html
    env.filters["inline_code"] = inline_code
    env.filters["markdown"] = markdown
