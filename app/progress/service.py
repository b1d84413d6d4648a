"""A learner's progress: cards reached, quick-checks answered right, exercises passed; and
where to continue."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.accounts.service import Learner, owned_by
from app.db import utcnow
from app.lessons.content import Course, Exercise, Lesson
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from app.submissions.models import Mode, Status, Submission


@dataclass(frozen=True)
class LessonProgress:
    lesson: Lesson
    cards: frozenset[int]             # indexes of the cards reached
    questions_right: frozenset[str]   # question ids answered right at least once
    exercises_passed: tuple[str, ...]
    last_active: datetime | None

    @property
    def cards_total(self) -> int:
        return len(self.lesson.text("en").cards)

    @property
    def last_card(self) -> int | None:
        """The furthest card reached."""
        return max(self.cards, default=None)

    @property
    def quiz_passed(self) -> bool:
        return len(self.questions_right) == len(self.lesson.questions)

    @property
    def steps_total(self) -> int:
        return self.cards_total + 1 + len(self.lesson.exercises)

    @property
    def steps_done(self) -> int:
        return len(self.cards) + self.quiz_passed + len(self.exercises_passed)

    @property
    def complete(self) -> bool:
        return self.steps_done == self.steps_total


@dataclass(frozen=True)
class Resume:
    """Where to continue: a card (its index), the quick-check, an exercise, or a lesson's start."""

    lesson: Lesson
    card: int | None = None
    quiz: bool = False
    exercise: Exercise | None = None

    def anchor(self, lang: str) -> str:
        if self.card is not None:
            return self.lesson.text(lang).cards[self.card].anchor
        return "quiz" if self.quiz else ""


@dataclass(frozen=True)
class CourseProgress:
    lessons: tuple[LessonProgress, ...]

    def of(self, lesson: Lesson) -> LessonProgress:
        return next(p for p in self.lessons if p.lesson.slug == lesson.slug)

    @property
    def started(self) -> bool:
        return any(p.last_active for p in self.lessons)

    @property
    def resume(self) -> Resume | None:
        """The next step in the most recently active lesson, else in the lessons after it (then
        before it); None before any activity and once the course is complete."""
        active = [p for p in self.lessons if p.last_active]
        if not active:
            return None
        start = self.lessons.index(max(active, key=lambda p: p.last_active))
        return next(filter(None, map(_next_step, self.lessons[start:] + self.lessons[:start])), None)


def _next_step(p: LessonProgress) -> Resume | None:
    if p.last_card is not None and p.last_card + 1 < p.cards_total:
        return Resume(p.lesson, card=p.last_card)
    if p.last_active and not p.quiz_passed:
        return Resume(p.lesson, quiz=True)
    if p.last_active and (todo := [ex for ex in p.lesson.exercises if ex.id not in p.exercises_passed]):
        return Resume(p.lesson, exercise=todo[0])
    return None if p.complete else Resume(p.lesson)


def passed_exercises(session: Session, learner: Learner) -> dict[str, set[str]]:
    """lesson slug → ids of the exercises the learner passed (a graded submission, not a run)."""
    passed: dict[str, set[str]] = {}
    for exercise_id in session.scalars(
        select(Submission.exercise).distinct().where(
            owned_by(Submission, learner), Submission.status == Status.PASSED,
            Submission.mode == Mode.SUBMIT)
    ):
        passed.setdefault(exercise_id.split("/", 1)[0], set()).add(exercise_id)
    return passed


def course_progress(session: Session, learner: Learner, course: Course) -> CourseProgress:
    cards: dict[str, set[int]] = {}
    active: dict[str, datetime] = {}
    for lesson, card, reached in session.execute(
        select(CardReached.lesson, CardReached.card, func.max(CardReached.reached_at))
        .where(owned_by(CardReached, learner)).group_by(CardReached.lesson, CardReached.card)
    ):
        cards.setdefault(lesson, set()).add(card)
        active[lesson] = max(reached, active.get(lesson, reached))
    right: dict[str, set[str]] = {}
    for lesson, question, ever_right, answered in session.execute(
        select(QuizAttempt.lesson, QuizAttempt.question,
               func.max(case((QuizAttempt.correct, 1), else_=0)), func.max(QuizAttempt.created_at))
        .where(owned_by(QuizAttempt, learner)).group_by(QuizAttempt.lesson, QuizAttempt.question)
    ):
        if ever_right:
            right.setdefault(lesson, set()).add(question)
        active[lesson] = max(answered, active.get(lesson, answered))
    passed = passed_exercises(session, learner)
    return CourseProgress(tuple(
        LessonProgress(
            lesson=lesson,
            # Only what still exists: lesson files may have changed since.
            cards=frozenset(c for c in cards.get(lesson.slug, ()) if c < len(lesson.text("en").cards)),
            questions_right=frozenset(q.id for q in lesson.questions if q.id in right.get(lesson.slug, ())),
            exercises_passed=tuple(ex.id for ex in lesson.exercises if ex.id in passed.get(lesson.slug, ())),
            last_active=active.get(lesson.slug),
        )
        for lesson in course.lessons
    ))


def reach_card(session: Session, learner: Learner, lesson: Lesson, card: int) -> None:
    """Note that the learner reached a card (again)."""
    row = session.scalars(select(CardReached).where(
        owned_by(CardReached, learner), CardReached.lesson == lesson.slug, CardReached.card == card
    ).limit(1)).first()
    if row is None:
        session.add(CardReached(**learner.owner, lesson=lesson.slug, card=card))
    else:
        row.reached_at = utcnow()
