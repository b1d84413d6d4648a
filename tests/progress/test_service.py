"""Where "continue where you left off" leads, from the progress alone."""

from datetime import UTC, datetime, timedelta

from app.lessons.course import load_course
from app.progress.service import CourseProgress, LessonProgress
from tests.conftest import LESSONS

COURSE = load_course(LESSONS)
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _progress(
    slug: str, *, cards: int = 0, quiz: bool = False, exercises: bool = False, minutes: int | None = None
) -> LessonProgress:
    lesson = COURSE.lesson(slug)
    return LessonProgress(
        lesson=lesson,
        cards=frozenset(range(cards)),
        questions_right=frozenset(q.id for q in lesson.questions) if quiz else frozenset(),
        exercises_passed=tuple(ex.id for ex in lesson.exercises) if exercises else (),
        last_active=None if minutes is None else T0 + timedelta(minutes=minutes),
    )


def _course(**done: LessonProgress) -> CourseProgress:
    return CourseProgress(
        tuple(done.get(lsn.slug.replace("-", "_"), _progress(lsn.slug)) for lsn in COURSE.lessons)
    )


def _complete(slug: str, minutes: int) -> LessonProgress:
    cards = len(COURSE.lesson(slug).text("en").core_cards)
    return _progress(slug, cards=cards, quiz=True, exercises=True, minutes=minutes)


def test_nothing_done_nothing_to_resume():
    assert _course().resume is None
    assert not _course().started


def test_the_most_recent_lesson_wins_at_its_furthest_card():
    progress = _course(
        mixed_precision=_progress("mixed-precision", cards=3, minutes=5),
        bottleneck=_progress("bottleneck", cards=2, minutes=1),
    )
    assert (progress.resume.lesson.slug, progress.resume.card) == ("mixed-precision", 2)


def test_a_complete_lesson_leads_to_the_next_one_not_complete_then_wraps():
    progress = _course(
        mixed_precision=_complete("mixed-precision", 9),
        gradient_accumulation=_complete("gradient-accumulation", 1),
    )
    resume = progress.resume
    assert (resume.lesson.slug, resume.card, resume.quiz, resume.exercise) == (
        "bottleneck",
        None,
        False,
        None,
    )
    last = COURSE.lessons[-1].slug
    progress = _course(**{last.replace("-", "_"): _complete(last, 9)})
    assert progress.resume.lesson.slug == COURSE.lessons[0].slug


def test_a_finished_course_has_nowhere_to_resume():
    progress = _course(
        **{lsn.slug.replace("-", "_"): _complete(lsn.slug, i) for i, lsn in enumerate(COURSE.lessons)}
    )
    assert progress.started and progress.resume is None
