"""A learner's progress: cards reached, quick-checks answered right, exercises worked on and
passed; and where to continue.

A lesson's bar has three kinds of parts of equal weight: reading its core cards (together one
part, by the share read; "Go further" cards are extra and do not count), its quick check, and
each of its exercises. Exercise work, passed or not, is activity: it decides where to continue."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from sqlalchemy import (
    Boolean,
    CompoundSelect,
    Integer,
    String,
    and_,
    case,
    cast,
    func,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.orm import Session

from app import locks
from app.accounts.ownership import Learner, owned_by, owner_clause, owner_params
from app.db import aware, utcnow
from app.lessons.course import Course, Exercise, Lesson
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from app.submissions import service as submissions
from app.submissions.models import Mode, Status, Submission


@dataclass(frozen=True)
class LessonProgress:
    lesson: Lesson
    cards: frozenset[int]  # indexes of the cards reached
    questions_right: frozenset[str]  # question ids answered right at least once
    exercises_passed: tuple[str, ...]
    last_active: datetime | None
    answers: Mapping[str, str] = field(default_factory=dict)  # question id → the option chosen last
    working_on: Exercise | None = None  # not passed yet, and the lesson's latest activity

    @property
    def cards_total(self) -> int:
        """The core cards ("Go further" ones come last and are extra)."""
        return len(self.lesson.text("en").core_cards)

    @property
    def last_card(self) -> int | None:
        """The furthest card reached."""
        return max(self.cards, default=None)

    @property
    def quiz_passed(self) -> bool:
        return len(self.questions_right) == len(self.lesson.questions)

    @property
    def steps_total(self) -> int:
        """Reading, the quick check, and one part per exercise."""
        return 2 + len(self.lesson.exercises)

    @property
    def steps_done(self) -> float:
        read = len(self.cards) / self.cards_total if self.cards_total else 1
        return read + self.quiz_passed + len(self.exercises_passed)

    @property
    def percent(self) -> int:
        return int(100 * self.steps_done / self.steps_total)

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
        active = [(p.last_active, i) for i, p in enumerate(self.lessons) if p.last_active]
        if not active:
            return None
        start = max(active, key=lambda when: when[0])[1]  # on a tie, the earlier lesson
        return next(filter(None, map(_next_step, self.lessons[start:] + self.lessons[:start])), None)


def _next_step(p: LessonProgress) -> Resume | None:
    if p.working_on is not None:  # back to the exercise in hand
        return Resume(p.lesson, exercise=p.working_on)
    if p.last_card is not None and p.last_card + 1 < p.cards_total:
        return Resume(p.lesson, card=p.last_card)
    if p.last_active and not p.quiz_passed:
        return Resume(p.lesson, quiz=True)
    if p.last_active and (todo := [ex for ex in p.lesson.exercises if ex.id not in p.exercises_passed]):
        return Resume(p.lesson, exercise=todo[0])
    return None if p.complete else Resume(p.lesson)


@cache
def _activity(signed_in: bool) -> CompoundSelect:
    """Everything progress is made of, in one round trip: the cards a learner reached, their
    quick-check answers, and per exercise when they last sent code and whether a graded
    submission (not a run) passed. Built
    once per kind of learner and run with ``owner_params``: a page pays for the query, not for
    building it. Each part fills the columns it has; the others are typed NULLs."""

    def none(kind):
        return cast(null(), kind)

    return union_all(
        select(
            literal_column("'card'").label("kind"),
            CardReached.lesson.label("lesson"),
            CardReached.card.label("card"),
            none(String).label("item"),
            none(String).label("option"),
            none(Boolean).label("correct"),
            CardReached.reached_at.label("at"),
            CardReached.id.label("id"),
        ).where(owner_clause(CardReached, signed_in)),
        select(
            literal_column("'answer'"),
            QuizAttempt.lesson,
            none(Integer),
            QuizAttempt.question,
            QuizAttempt.option,
            QuizAttempt.correct,
            QuizAttempt.created_at,
            QuizAttempt.id,
        ).where(owner_clause(QuizAttempt, signed_in)),
        select(
            literal_column("'exercise'"),
            none(String),
            none(Integer),
            Submission.exercise,
            none(String),
            cast(
                func.max(
                    case(
                        (and_(Submission.status == Status.PASSED, Submission.mode == Mode.SUBMIT), 1), else_=0
                    )
                ),
                Boolean,
            ),
            func.max(Submission.created_at),
            func.max(Submission.id),
        )
        .where(owner_clause(Submission, signed_in))
        .group_by(Submission.exercise),
    )


def course_progress(session: Session, learner: Learner, course: Course) -> CourseProgress:
    cards: dict[str, set[int]] = {}
    active: dict[str, datetime] = {}
    right: dict[str, set[str]] = {}
    answers: dict[str, dict[str, str]] = {}
    passed: set[str] = set()
    worked: dict[str, tuple[datetime, str]] = {}  # lesson → (when, exercise id) of the latest code sent
    rows = session.execute(_activity(learner.user is not None), owner_params(learner)).all()
    for row in sorted(rows, key=lambda r: r.id or 0):  # answers oldest first: the last one counts
        if row.kind == "exercise":
            lesson = row.item.split("/", 1)[0]
            at = aware(row.at)
            if row.correct:
                passed.add(row.item)
            if lesson not in worked or at > worked[lesson][0]:
                worked[lesson] = (at, row.item)
            continue
        at = aware(row.at)
        active[row.lesson] = max(at, active.get(row.lesson, at))
        if row.kind == "card":
            cards.setdefault(row.lesson, set()).add(row.card)
        else:
            answers.setdefault(row.lesson, {})[row.item] = row.option
            if row.correct:
                right.setdefault(row.lesson, set()).add(row.item)
    return CourseProgress(
        tuple(
            _lesson_progress(
                lesson,
                cards.get(lesson.slug, set()),
                right.get(lesson.slug, set()),
                passed,
                answers.get(lesson.slug, {}),
                active.get(lesson.slug),
                worked.get(lesson.slug),
            )
            for lesson in course.lessons
        )
    )


def _lesson_progress(
    lesson: Lesson,
    cards: set[int],
    right: set[str],
    passed: set[str],
    answers: dict[str, str],
    last_active: datetime | None,
    worked: tuple[datetime, str] | None,
) -> LessonProgress:
    """Only what still exists counts: lesson files may have changed since."""
    working_on = None
    if worked is not None:
        at, exercise_id = worked
        if last_active is None or at >= last_active:
            last_active = at
            if exercise_id not in passed:
                working_on = next((ex for ex in lesson.exercises if ex.id == exercise_id), None)
    return LessonProgress(
        lesson=lesson,
        cards=frozenset(c for c in cards if c < len(lesson.text("en").core_cards)),
        questions_right=frozenset(q.id for q in lesson.questions if q.id in right),
        exercises_passed=tuple(ex.id for ex in lesson.exercises if ex.id in passed),
        last_active=last_active,
        answers={
            q: o
            for q, o in answers.items()
            if (question := lesson.question(q)) is not None and question.option(o) is not None
        },
        working_on=working_on,
    )


def within_quota(session: Session, learner: Learner, client: str, limit: int) -> bool:
    """Whether the visitors without an account behind ``client`` (an address, an IPv6 /64) may
    store one more quick-check answer or card reached: together they keep at most ``limit``
    (TREINO_ANONYMOUS_ANSWERS_PER_CLIENT; every cookie-less request is a new visitor, so the
    quota is the address's). A signed-in learner's rows are the account's: always. The count is
    locked until the caller's transaction commits (app/locks.py): a burst cannot pass on one."""
    if learner.user is not None:
        return True
    locks.hold(session, f"answers:{client}")
    kept = sum(
        session.scalar(
            select(func.count()).select_from(model).where(model.client == client, model.user_id.is_(None))
        )
        or 0
        for model in (QuizAttempt, CardReached)
    )
    return kept < limit


def reach_card(
    session: Session, learner: Learner, lesson: Lesson, card: int, *, client: str, limit: int
) -> None:
    """Note that the learner reached a card (again); a first visit only within the client's quota
    (within_quota: past it, nothing is noted)."""
    row = session.scalars(
        select(CardReached)
        .where(owned_by(CardReached, learner), CardReached.lesson == lesson.slug, CardReached.card == card)
        .limit(1)
    ).first()
    if row is not None:
        row.reached_at = utcnow()
    elif within_quota(session, learner, client, limit):
        session.add(CardReached(**learner.owner, lesson=lesson.slug, card=card, client=client))


@dataclass(frozen=True)
class ExerciseResult:
    """How a learner did on one exercise: graded attempts (runs and code that never ran are no
    attempts: submissions.service.Attempts) and the first that passed."""

    exercise: Exercise
    attempts: submissions.Attempts

    @property
    def passed_on(self) -> int | None:
        """The number of the attempt that first passed."""
        first = self.attempts.first_pass
        return None if first is None else self.attempts.numbers[first]


def results(session: Session, learner: Learner, lesson: Lesson) -> tuple[ExerciseResult, ...]:
    return tuple(ExerciseResult(ex, submissions.attempts(session, learner, ex.id)) for ex in lesson.exercises)
