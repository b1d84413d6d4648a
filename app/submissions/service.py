from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounts.ownership import Learner, owned_by
from app.db import aware, utcnow
from app.submissions.models import Mode, Status, Submission


def with_key(session: Session, learner: Learner, key: str) -> Submission | None:
    """The learner's submission sent with idempotency ``key``, if any."""
    return session.scalar(
        select(Submission).where(Submission.idempotency_key == key, owned_by(Submission, learner))
    )


def active_key(learner: Learner) -> str:
    return f"user:{learner.user.id}" if learner.user else f"visitor:{learner.visitor_id}"


def get_own(session: Session, learner: Learner, submission_id: int) -> Submission | None:
    return session.scalar(
        select(Submission).where(Submission.id == submission_id, owned_by(Submission, learner))
    )


def history(session: Session, learner: Learner, exercise_id: str, limit: int = 20) -> list[Submission]:
    """The learner's submissions for one exercise, newest first."""
    return list(
        session.scalars(
            select(Submission)
            .where(owned_by(Submission, learner), Submission.exercise == exercise_id)
            .order_by(Submission.id.desc())
            .limit(limit)
        )
    )


@dataclass(frozen=True)
class Attempts:
    """A learner's attempts at one exercise: the graded submissions (``graded``), each numbered
    from 1 in the order sent (a learner reads "attempt 3", never the server-wide id; one still
    waiting holds the next number), and how many of them did not pass. Runs, cancelled sends and
    code that never ran (a syntax error, a file turned down, trouble of ours) are no attempts."""

    numbers: dict[int, int]
    failures: int
    first_pass: int | None = None  # the id of the first that passed

    @property
    def graded(self) -> int:
        return len(self.numbers)

    def number(self, submission: Submission) -> int:
        """The attempt's number; 0 for a submission that is no attempt."""
        return self.numbers.get(submission.id, 0)


SHOW_SOLUTION_AFTER = 3  # graded failures before the reference solution may be asked for
NEVER_RAN = frozenset({"error.syntax"})  # error checks of code that the grader could not even start


def graded(mode: str, status: str, verdict: dict[str, Any] | None) -> bool:
    """Whether a final submission was judged on what the learner's code did: graded, not a run;
    and passed, failed, timed out, or stopped with an error of its own once running (a record's
    check keys say which; a version-1 verdict, already rendered, counts as before)."""
    if mode != Mode.SUBMIT:
        return False
    if status in (Status.PASSED, Status.FAILED, Status.TIMEOUT):
        return True
    if status != Status.ERROR or not verdict or verdict.get("reason"):
        return False
    checks = verdict.get("checks") or []
    return not any(isinstance(c, dict) and c.get("message") in NEVER_RAN for c in checks)


def attempts(session: Session, learner: Learner, exercise_id: str) -> Attempts:
    rows = session.execute(
        select(Submission.id, Submission.mode, Submission.status)
        .where(owned_by(Submission, learner), Submission.exercise == exercise_id)
        .order_by(Submission.id)
    ).all()
    errors = [row.id for row in rows if row.mode == Mode.SUBMIT and row.status == Status.ERROR]
    verdicts: dict[int, Any] = {}
    if errors:  # only errors need their verdict read: did the code run at all?
        found = session.execute(select(Submission.id, Submission.verdict).where(Submission.id.in_(errors)))
        verdicts = {id_: verdict for id_, verdict in found}
    active = (Status.QUEUED, Status.RUNNING)
    counted = [
        row
        for row in rows
        if graded(row.mode, row.status, verdicts.get(row.id))
        or (row.mode == Mode.SUBMIT and row.status in active)
    ]
    return Attempts(
        {row.id: n for n, row in enumerate(counted, start=1)},
        sum(row.status not in (Status.PASSED, *active) for row in counted),
        next((row.id for row in counted if row.status == Status.PASSED), None),
    )


def elapsed_seconds(submission: Submission, now: datetime | None = None) -> int | None:
    """Whole seconds since the job started running; None unless running."""
    if submission.status != Status.RUNNING or submission.started_at is None:
        return None
    return max(0, int(((now or utcnow()) - aware(submission.started_at)).total_seconds()))
