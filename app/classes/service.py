"""Classes: made by any account, joined with a code, left at any time; and the class's report,
read from what the grader and the quick checks recorded.

The report is a handful of queries whatever the class's size (no query per learner): the
learners, their submissions counted per learner, exercise and status, the named mistakes
counted per exercise, one example verdict per mistake, and the wrong quick-check options. Every
one reads only the rows of accounts that are the class's learners now: a learner who left is
not read at all."""

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, delete, func, select, union_all
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounts.models import User
from app.classes.models import Classroom, Member, Role
from app.db import aware
from app.lessons.course import Course
from app.quizzes.models import QuizAttempt
from app.submissions import service as submissions
from app.submissions.models import Mode, Status, Submission

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud or copied by hand
CODE_LENGTH = 10  # 32**10: not guessed by trying
NAME_MAX = 80


class NotFound(Exception):
    """No class has that code (or it was renewed since)."""


class LastTeacher(Exception):
    """The only teacher may not leave: the class would have no one to see it."""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normal_code(code: str) -> str:
    """A code as typed: spaces and dashes dropped, upper-cased."""
    return "".join(c for c in code.upper() if c not in " -")


def default_name(user: User) -> str:
    """How a member is shown until they choose: the part of their address before the @."""
    return user.email.split("@")[0][:NAME_MAX]


def create(session: Session, teacher: User, name: str, course: str = "") -> Classroom:
    """A new class, `teacher` its first teacher."""
    classroom = Classroom(
        name=name.strip(), course=course.strip(), join_code=new_code(), teacher_code=new_code()
    )
    session.add(classroom)
    session.flush()
    session.add(
        Member(class_id=classroom.id, user_id=teacher.id, role=Role.TEACHER, name=default_name(teacher))
    )
    session.flush()
    return classroom


def renew_codes(session: Session, classroom: Classroom) -> None:
    """New codes: the links given out so far stop working; members stay."""
    classroom.join_code = new_code()
    classroom.teacher_code = new_code()
    session.flush()


def by_code(session: Session, code: str) -> tuple[Classroom, Role] | None:
    """The class a code opens, and the role it gives."""
    code = normal_code(code)
    if not (code.isascii() and code.isalnum()) or len(code) > CODE_LENGTH:
        return None  # no code has other characters: nothing to look up
    found = session.scalar(
        select(Classroom).where((Classroom.join_code == code) | (Classroom.teacher_code == code))
    )
    if found is None:
        return None
    return found, Role.TEACHER if found.teacher_code == code else Role.LEARNER


def join(session: Session, user: User, code: str, name: str | None = None) -> tuple[Classroom, Member]:
    """`user` joins the class the code opens. Joining again changes nothing (a teacher stays a
    teacher); a learner given a teacher's code becomes a teacher."""
    opened = by_code(session, code)
    if opened is None:
        raise NotFound
    classroom, role = opened
    shown = (name or "").strip()[:NAME_MAX] or default_name(user)
    member = membership(session, classroom.id, user)
    if member is None:
        member = Member(class_id=classroom.id, user_id=user.id, role=role, name=shown)
        try:
            with session.begin_nested():
                session.add(member)
        except IntegrityError:  # the same join sent twice at once: the other one made it
            found = membership(session, classroom.id, user)
            assert found is not None
            member = found
    elif role == Role.TEACHER:
        member.role = Role.TEACHER
    if name:
        member.name = shown
    session.flush()
    return classroom, member


def membership(session: Session, class_id: int, user: User) -> Member | None:
    return session.scalar(select(Member).where(Member.class_id == class_id, Member.user_id == user.id))


def taught(session: Session, class_id: int, user: User) -> Classroom | None:
    """The class, if `user` teaches it; anyone else learns nothing, not even that it exists."""
    return session.scalar(
        select(Classroom)
        .join(Member, Member.class_id == Classroom.id)
        .where(Classroom.id == class_id, Member.user_id == user.id, Member.role == Role.TEACHER)
    )


def leave(session: Session, class_id: int, user: User) -> bool:
    """`user` leaves the class (False: they were not in it). The last teacher may not."""
    member = membership(session, class_id, user)
    if member is None:
        return False
    if member.role == Role.TEACHER and len(teachers(session, class_id)) == 1:
        raise LastTeacher
    session.delete(member)
    session.flush()
    return True


def remove(session: Session, classroom: Classroom, user_id: int) -> bool:
    """A teacher removes a learner (teachers are not removed this way)."""
    result = session.execute(
        delete(Member).where(
            Member.class_id == classroom.id, Member.user_id == user_id, Member.role == Role.LEARNER
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def teachers(session: Session, class_id: int) -> list[Member]:
    return list(
        session.scalars(
            select(Member).where(Member.class_id == class_id, Member.role == Role.TEACHER).order_by(Member.id)
        )
    )


def classes_of(session: Session, user: User) -> list[tuple[Classroom, Member]]:
    """The classes `user` teaches or learns in, newest first."""
    rows = session.execute(
        select(Classroom, Member)
        .join(Member, Member.class_id == Classroom.id)
        .where(Member.user_id == user.id)
        .order_by(Classroom.id.desc())
    )
    return [(c, m) for c, m in rows]


def learner(session: Session, classroom: Classroom, user_id: int) -> Member | None:
    """One of the class's learners (None: not one now)."""
    return session.scalar(
        select(Member).where(
            Member.class_id == classroom.id, Member.user_id == user_id, Member.role == Role.LEARNER
        )
    )


def learner_submissions(session: Session, member: Member, limit: int = 200) -> list[Submission]:
    """A learner's submissions, newest first: what their teachers may read of them."""
    return list(
        session.scalars(
            select(Submission)
            .where(Submission.user_id == member.user_id)
            .order_by(Submission.id.desc())
            .limit(limit)
        )
    )


# ---------------------------------------------------------------- the report


PASSED, TRIED, NOT_STARTED = "passed", "tried", "not-started"


@dataclass
class Cell:
    """One learner on one exercise."""

    status: str = NOT_STARTED
    attempts: int = 0  # graded attempts, numbered as the learner sees them (submissions.Attempts)


@dataclass
class LearnerRow:
    id: int
    name: str
    cells: dict[str, Cell]
    last: datetime | None = None  # the latest submission or quick-check answer


@dataclass
class Mistake:
    id: str
    learners: int  # how many learners' graded code it was named in
    newest: int = 0  # the id of the newest submission it was named in
    example: Submission | None = None  # that submission: its verdict as its learner read it


@dataclass
class ExerciseRow:
    passed: int = 0
    attempted: int = 0
    mistakes: list[Mistake] = field(default_factory=list)  # most common first


@dataclass
class Report:
    classroom: Classroom
    learners: list[LearnerRow]
    exercises: dict[str, ExerciseRow]
    questions: dict[str, dict[str, int]]  # "<lesson>/<question>" → wrong option → learners who chose it


def _of_learners(column: Any, classroom: Classroom) -> ColumnElement[bool]:
    """Rows of the class's learners now; the members are a subquery, never a list of ids."""
    return column.in_(
        select(Member.user_id).where(Member.class_id == classroom.id, Member.role == Role.LEARNER)
    )


ACTIVE = (Status.QUEUED, Status.RUNNING)
GRADED = (Status.PASSED, Status.FAILED, Status.TIMEOUT)
NOT_WORK = (Status.CANCELLED, Status.REJECTED)  # sent, but nothing the learner's code did


def report(session: Session, classroom: Classroom, course: Course) -> Report:
    """What the class has done: the grid, per exercise the passes and the named mistakes, per
    quick-check question the wrong options chosen. Only the course's current exercises and
    questions count. Six queries whatever the class's size; the learners' submissions are read
    once, grouped per learner, exercise and named mistake."""
    members = session.execute(
        select(Member.user_id, Member.name)
        .where(Member.class_id == classroom.id, Member.role == Role.LEARNER)
        .order_by(func.lower(Member.name), Member.id)
    ).all()
    exercise_ids = [ex.id for ex in course.exercises]
    rows = {
        user_id: LearnerRow(user_id, name, {ex: Cell() for ex in exercise_ids}) for user_id, name in members
    }
    exercises = {ex: ExerciseRow() for ex in exercise_ids}
    questions: dict[str, dict[str, int]] = {}
    if rows:
        _fill_work(session, classroom, rows, exercises)
        _fill_last(session, classroom, rows)
        questions = _wrong_answers(session, classroom, course)
    for row in rows.values():
        for exercise_id, cell in row.cells.items():
            exercises[exercise_id].passed += cell.status == PASSED
            exercises[exercise_id].attempted += cell.status != NOT_STARTED
    return Report(classroom, list(rows.values()), exercises, questions)


def _fill_work(
    session: Session, classroom: Classroom, rows: dict[int, LearnerRow], exercises: dict[str, ExerciseRow]
) -> None:
    """The grid's cells (passed, tried: anything sent that ran or waits; attempts) and the named
    mistakes (learners per exercise and mistake, the newest such submission as its example),
    from one read of the learners' submissions grouped per learner, exercise and mistake."""
    submitted = Submission.mode == Mode.SUBMIT

    def flag(condition: ColumnElement[bool]) -> Any:
        return case((condition, 1), else_=0)

    # per submission, then grouped outside: PostgreSQL groups by the subquery's column, where a
    # GROUP BY of the JSON expression itself would not match the one selected
    each = (
        select(
            Submission.id,
            Submission.user_id,
            Submission.exercise,
            flag(submitted & Submission.status.in_((*GRADED, *ACTIVE))).label("attempt"),
            flag(submitted & (Submission.status == Status.PASSED)).label("passed"),
            flag(Submission.status.not_in(NOT_WORK)).label("worked"),
            # a named mistake is a graded failure's
            case((submitted & (Submission.status == Status.FAILED), diagnosis_id()), else_=None).label(
                "mistake"
            ),
        )
        .where(_of_learners(Submission.user_id, classroom))
        .subquery()
    )
    found = session.execute(
        select(
            each.c.user_id,
            each.c.exercise,
            each.c.mistake,
            func.sum(each.c.attempt),
            func.max(each.c.passed),
            func.max(each.c.worked),
            func.max(each.c.id),
        ).group_by(each.c.user_id, each.c.exercise, each.c.mistake)
    ).all()
    named: dict[tuple[str, str], Mistake] = {}
    for user_id, exercise, mistake, attempts, passed, worked, newest in found:
        cell = rows[user_id].cells.get(exercise)
        if cell is None:  # an exercise the course no longer has
            continue
        cell.attempts += attempts
        if passed:
            cell.status = PASSED
        elif worked and cell.status == NOT_STARTED:
            cell.status = TRIED
        if mistake:
            entry = named.setdefault((exercise, mistake), Mistake(mistake, 0))
            entry.learners += 1  # a row per learner: grouped by learner
            entry.newest = max(entry.newest, newest)
    # an error is an attempt only if the learner's code ran (submissions.graded reads its verdict)
    errors = session.execute(
        select(Submission.user_id, Submission.exercise, Submission.verdict).where(
            _of_learners(Submission.user_id, classroom), submitted, Submission.status == Status.ERROR
        )
    ).all()
    for user_id, exercise, verdict in errors:
        cell = rows[user_id].cells.get(exercise)
        if cell is not None and submissions.graded(Mode.SUBMIT, Status.ERROR, verdict):
            cell.attempts += 1
    wanted = [m.newest for m in named.values()]
    examples = {s.id: s for s in session.scalars(select(Submission).where(Submission.id.in_(wanted)))}
    for (exercise, _), mistake in named.items():
        mistake.example = examples.get(mistake.newest)
        exercises[exercise].mistakes.append(mistake)
    for row in exercises.values():
        row.mistakes.sort(key=lambda m: (-m.learners, m.id))


def _fill_last(session: Session, classroom: Classroom, rows: dict[int, LearnerRow]) -> None:
    """Each learner's last activity: their newest submission or quick-check answer (the newest is
    the highest id, found in the index on the owner; then one row each is read for its time)."""
    newest = union_all(
        *(
            select(model.created_at.label("at"), model.user_id.label("user_id")).where(
                model.id.in_(
                    select(func.max(model.id))
                    .where(_of_learners(model.user_id, classroom))
                    .group_by(model.user_id)
                )
            )
            for model in (Submission, QuizAttempt)
        )
    ).subquery()
    found = session.execute(select(newest.c.user_id, func.max(newest.c.at)).group_by(newest.c.user_id))
    for user_id, last in found:
        if isinstance(last, str):  # SQLite: MAX over a UNION loses the column's type
            last = datetime.fromisoformat(last)
        rows[user_id].last = aware(last) if last else None


def diagnosis_id() -> Any:
    """The named mistake of a stored verdict (record and rendered verdict alike keep it there)."""
    return Submission.verdict[("diagnosis", "id")].as_string()


def _wrong_answers(session: Session, classroom: Classroom, course: Course) -> dict[str, dict[str, int]]:
    """Per question of the course, each wrong option and how many learners chose it."""
    found = session.execute(
        select(
            QuizAttempt.lesson,
            QuizAttempt.question,
            QuizAttempt.option,
            func.count(func.distinct(QuizAttempt.user_id)),
        )
        .where(_of_learners(QuizAttempt.user_id, classroom), QuizAttempt.correct.is_(False))
        .group_by(QuizAttempt.lesson, QuizAttempt.question, QuizAttempt.option)
    ).all()
    chosen = {(lesson, q, o): n for lesson, q, o, n in found}
    questions: dict[str, dict[str, int]] = {}
    for lesson in course.lessons:
        for question in lesson.questions:
            wrong = {
                o.id: chosen[(lesson.slug, question.id, o.id)]
                for o in question.options
                if not o.correct and (lesson.slug, question.id, o.id) in chosen
            }
            questions[f"{lesson.slug}/{question.id}"] = dict(sorted(wrong.items(), key=lambda kv: -kv[1]))
    return questions


def stamp(session: Session, class_id: int) -> str:
    """What the report is made of, in a few numbers that change whenever it may: learners
    joining or leaving, a submission sent or finished, a quick-check answered. The class page
    waits for it to change (routes.class_changes)."""
    learners = select(Member.user_id).where(Member.class_id == class_id, Member.role == Role.LEARNER)
    row = session.execute(
        select(
            select(func.count()).where(Member.class_id == class_id).scalar_subquery().label("n"),
            select(func.coalesce(func.sum(Member.id), 0))
            .where(Member.class_id == class_id)
            .scalar_subquery()
            .label("members"),
            select(func.coalesce(func.max(Submission.id), 0))
            .where(Submission.user_id.in_(learners))
            .scalar_subquery()
            .label("sent"),
            select(func.count())
            .where(Submission.user_id.in_(learners), Submission.status.in_(ACTIVE))
            .scalar_subquery()
            .label("waiting"),
            select(func.coalesce(func.max(QuizAttempt.id), 0))
            .where(QuizAttempt.user_id.in_(learners))
            .scalar_subquery()
            .label("answered"),
        )
    ).one()
    return f"{row.n}.{row.members}.{row.sent}.{row.waiting}.{row.answered}"
