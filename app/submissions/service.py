import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from app.accounts.ownership import Learner, owned_by
from app.db import aware, utcnow
from app.drafts import service as drafts
from app.submissions.models import Mode, Status, Submission
from contracts.exercise import Exercise

NOTIFY_CHANNEL = "treino_jobs"  # worker/queue.py listens on it
MAX_PLACES = 10_000  # a queue longer than this shows no place for the jobs beyond it


class AlreadyActive(Exception):
    """The learner already has a submission queued or running."""


def enqueue(
    session: Session,
    learner: Learner,
    exercise: Exercise,
    code: str,
    *,
    mode: Mode,
    lang: str,
    request_id: str | None = None,
    client: str | None = None,
    key: str | None = None,
) -> Submission:
    """Insert the submission; it is a job as soon as this transaction commits. ``client`` is the
    address it came from: the queue serves clients in turn. With an idempotency ``key`` this
    learner already sent (code submitted offline, sent again), the submission made then is
    returned and nothing new is queued."""
    if key and (earlier := with_key(session, learner, key)) is not None:
        return earlier
    if key and session.scalar(select(Submission.id).where(Submission.idempotency_key == key)):
        key = None  # someone else's key (they are random: never by chance): an ordinary submission
    submission = Submission(
        **learner.owner,
        exercise=exercise.id,
        mode=mode,
        code=code,
        lang=lang,
        status=Status.QUEUED,
        active_owner=_active_key(learner),
        request_id=request_id,
        client=client,
        idempotency_key=key,
    )
    try:
        with session.begin_nested():
            session.add(submission)
    except IntegrityError:
        # the same key sent twice at once: the other request queued it
        if key and (earlier := with_key(session, learner, key)) is not None:
            return earlier
        raise AlreadyActive from None
    # what was sent is the draft from now on, counted in its address's quota (never refused: it is queued)
    drafts.save(session, learner, exercise.id, code, client=client)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_notify(:channel, :id)"), {"channel": NOTIFY_CHANNEL, "id": str(submission.id)}
        )
    return submission


def with_key(session: Session, learner: Learner, key: str) -> Submission | None:
    """The learner's submission sent with idempotency ``key``, if any."""
    return session.scalar(
        select(Submission).where(Submission.idempotency_key == key, owned_by(Submission, learner))
    )


def _active_key(learner: Learner) -> str:
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


def cancel(session: Session, submission: Submission) -> None:
    """Stop waiting for a queued or running submission: it ends as `cancelled` at once, so the
    learner may send again (a worker running it stops when it sees the row is no longer its).
    A final submission stays as it is."""
    session.execute(
        update(Submission)
        .where(Submission.id == submission.id, Submission.status.in_((Status.QUEUED, Status.RUNNING)))
        .values(
            status=Status.CANCELLED,
            active_owner=None,
            finished_at=utcnow(),
            lease_owner=None,
            lease_expires_at=None,
        )
    )
    session.refresh(submission)


def elapsed_seconds(submission: Submission, now: datetime | None = None) -> int | None:
    """Whole seconds since the job started running; None unless running."""
    if submission.status != Status.RUNNING or submission.started_at is None:
        return None
    return max(0, int(((now or utcnow()) - aware(submission.started_at)).total_seconds()))


def serving_rank() -> Any:
    """The order in which workers claim queued jobs (worker/queue.py), smallest first: when the
    job's client last had a job started, or (a client never served, or none known) when this job
    was queued. A new address ranks by its arrival, never ahead of everyone, so a fresh address
    per job does not jump the queue; ties go to the older job (the lower id)."""
    earlier = aliased(Submission)
    served = (
        select(func.max(earlier.started_at))
        .where(earlier.client == Submission.client, earlier.started_at.is_not(None))
        .correlate(Submission)
        .scalar_subquery()
    )
    return func.coalesce(served, Submission.created_at)


def queue_places(session: Session) -> dict[int, int]:
    """Every queued job's place, 1 for the next a worker will claim (in serving_rank's order,
    as the queue claims them), from one query. A place can grow while a job waits, as clients
    served longer ago arrive."""
    ids = session.scalars(
        select(Submission.id)
        .where(Submission.status == Status.QUEUED)
        .order_by(serving_rank(), Submission.id)
        .limit(MAX_PLACES)
    )
    return {job: n for n, job in enumerate(ids, start=1)}


def queue_position(session: Session, submission: Submission) -> int | None:
    """The submission's place in the queue now (queue_places); None unless queued or beyond
    MAX_PLACES."""
    if submission.status != Status.QUEUED:
        return None
    return queue_places(session).get(submission.id)


class QueueOrder:
    """The queue's places, shared by every poll one web process answers for up to MAX_AGE
    seconds: a class waiting on its verdicts, polling each second, asks the database for the
    queue's order a few times a second in all, not once per poll, each counting the whole queue
    again (issue 26: that was most of the web's work during a burst)."""

    MAX_AGE = 0.5  # seconds

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._places: dict[int, int] = {}
        self._newest = 0  # the newest job queued when the places were read
        self._at = -math.inf

    def position(self, session: Session, submission: Submission) -> int | None:
        """queue_position, from places at most MAX_AGE old; a job newer than they are (queued
        since they were read) has them read again."""
        if submission.status != Status.QUEUED:
            return None
        with self._lock:
            now = time.monotonic()
            if now - self._at > self.MAX_AGE or submission.id > self._newest:
                self._places, self._at = queue_places(session), now
                # beyond MAX_PLACES, or claimed meanwhile: not read again until they are old
                self._newest = max([submission.id, *self._places])  # none left: the queue emptied
            return self._places.get(submission.id)
