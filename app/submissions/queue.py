"""The queue, in one room: the submissions table is the queue, and this module is everything
that puts a job in it, orders it, takes it out and tells who waits. The web enqueues, cancels and
shows places; the worker claims, renews its lease, finishes and gives up on abandoned jobs.

**Order.** Clients are served in turn (``serving_rank``): the job of the client served longest
ago comes first (a client never served: as if served when the job was queued), the oldest among
equals; the places a learner sees (``queue_places``) are read in that same order.

**Claiming** is one UPDATE … WHERE id = (oldest claimable) RETURNING: on PostgreSQL the inner
SELECT takes its row FOR UPDATE SKIP LOCKED, so concurrent workers never pick the same job; on
SQLite the statement is a write transaction of its own, which SQLite serialises. A job's lease is
renewed while it runs; a job whose lease expired (its worker died) is claimed again, and after
``max_attempts`` claims it ends as ``error`` instead. Finishing checks the lease, so a worker that
lost its lease cannot overwrite the verdict another worker wrote.

**Telling who waits** is the database's, one way: on PostgreSQL a trigger sends NOTIFY on
``CHANNEL`` with the row's id when a submission is inserted or its status changes (migrations
0007 and 0014; delivered at commit, whoever wrote it). Workers listen to start on a new job at
once, the web's watcher (app/submissions/watch.py) to answer a waiting page. SQLite has no
NOTIFY: both watch the database's files instead (``Written``: every commit, whoever wrote it,
changes the size or the time of its write-ahead log), a few microseconds each ``WRITTEN_SECONDS``,
and read the rows when they changed, and every poll besides. The row stays the truth: a lost
notification only delays.
"""

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, Result, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased, sessionmaker

from app.accounts.ownership import Learner
from app.db import utcnow
from app.drafts import service as drafts
from app.submissions import service
from app.submissions.models import Mode, Status, Submission
from contracts.exercise import Exercise
from contracts.verdict import Record, trouble

CHANNEL = "treino_status"  # the triggers of migrations 0007 and 0014 send on it
MAX_PLACES = 10_000  # a queue longer than this shows no place for the jobs beyond it
WRITTEN_SECONDS = 0.01  # how often a waiter on SQLite looks at the database's files


class Written:
    """Whether an SQLite database was written since the last look: the size and modification
    time of its file and of its write-ahead log (a commit appends to the log; a checkpoint
    rewrites the file), read with ``stat``. What a waiter on SQLite looks at every
    ``WRITTEN_SECONDS`` instead of reading the rows: a change it reports may be anyone's write
    (the waiter's own among them), so the rows are read then; a write it missed cannot be one
    made after the last look, which any later look sees."""

    def __init__(self, database: str) -> None:
        self.paths = (database, f"{database}-wal")
        self.last = self._stamp()

    def _stamp(self) -> tuple[tuple[int, int] | None, ...]:
        stamps: list[tuple[int, int] | None] = []
        for path in self.paths:
            try:
                st = os.stat(path)
            except OSError:  # not made yet, or the log checkpointed away
                stamps.append(None)
            else:
                stamps.append((st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def changed(self) -> bool:
        now = self._stamp()
        if now == self.last:
            return False
        self.last = now
        return True

    @classmethod
    def of(cls, database_url: Any) -> "Written | None":
        """A watch on ``database_url``'s files, or None where there is nothing to watch: not
        SQLite (PostgreSQL notifies), or a database in memory."""
        from sqlalchemy.engine import make_url

        url = make_url(database_url) if isinstance(database_url, str) else database_url
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return None
        return cls(url.database)


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
    """Insert the submission; it is a job as soon as this transaction commits (and the insert
    trigger tells the workers: CHANNEL). ``client`` is the
    address it came from: the queue serves clients in turn. With an idempotency ``key`` this
    learner already sent (code submitted offline, sent again), the submission made then is
    returned and nothing new is queued."""
    if key and (earlier := service.with_key(session, learner, key)) is not None:
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
        active_owner=service.active_key(learner),
        request_id=request_id,
        client=client,
        idempotency_key=key,
    )
    try:
        with session.begin_nested():
            session.add(submission)
    except IntegrityError:
        # the same key sent twice at once: the other request queued it
        if key and (earlier := service.with_key(session, learner, key)) is not None:
            return earlier
        raise AlreadyActive from None
    # what was sent is the draft from now on, counted in its address's quota (never refused: it is queued)
    drafts.save(session, learner, exercise.id, code, client=client)
    return submission


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


def serving_rank() -> Any:
    """The order in which workers claim queued jobs (claim), smallest first: when the
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


# ---------------------------------------------------------------- the worker's side


@dataclass(frozen=True)
class Job:
    id: int
    exercise: str
    mode: str
    code: str
    lang: str
    attempts: int
    request_id: str | None


def _claimable(now: datetime):
    return or_(
        Submission.status == Status.QUEUED,
        and_(Submission.status == Status.RUNNING, Submission.lease_expires_at < now),
    )


def claim(sessions: sessionmaker[Session], worker: str, lease: timedelta, max_attempts: int) -> Job | None:
    """Take the next queued (or abandoned) job, or None. Clients are served in turn: the job
    of the client served longest ago comes first (a client never served: as if served when the
    job was queued), the oldest job among equals; so one address sending many jobs waits behind
    its own, and a new address waits behind those queued before it."""
    give_up_abandoned(sessions, max_attempts)
    now = utcnow()
    oldest = (
        select(Submission.id)
        .where(_claimable(now))
        .order_by(serving_rank(), Submission.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    with sessions.begin() as session:
        row = session.execute(
            update(Submission)
            .where(Submission.id == oldest, _claimable(now))
            .values(
                status=Status.RUNNING,
                lease_owner=worker,
                lease_expires_at=now + lease,
                attempts=Submission.attempts + 1,
                started_at=now,
            )
            .returning(
                Submission.id,
                Submission.exercise,
                Submission.mode,
                Submission.code,
                Submission.lang,
                Submission.attempts,
                Submission.request_id,
            )
            .execution_options(synchronize_session=False)
        ).first()
    return Job(*row) if row else None


def _one_row(result: Result[*tuple[object, ...]]) -> bool:
    """Whether an UPDATE changed exactly one row. A session types every result as a plain
    Result; an UPDATE's is a CursorResult, the one that counts rows."""
    assert isinstance(result, CursorResult)
    return result.rowcount == 1


def renew(sessions: sessionmaker[Session], job_id: int, worker: str, lease: timedelta) -> bool:
    """Extend the lease; False when this worker no longer holds the job."""
    with sessions.begin() as session:
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == job_id, Submission.lease_owner == worker, Submission.status == Status.RUNNING
            )
            .values(lease_expires_at=utcnow() + lease)
            .execution_options(synchronize_session=False)
        )
    return _one_row(result)


def finish(sessions: sessionmaker[Session], job_id: int, worker: str, verdict: Record) -> bool:
    """Store the verdict and end the job; False (and nothing written) if the lease was lost.
    ValueError for a verdict that is not strict JSON (NaN, infinity): no database is asked to
    store what one of them refuses."""
    json.dumps(verdict, allow_nan=False)
    with sessions.begin() as session:
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == job_id, Submission.lease_owner == worker, Submission.status == Status.RUNNING
            )
            .values(
                status=verdict["status"],
                verdict=verdict,
                finished_at=utcnow(),
                active_owner=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
    return _one_row(result)


def give_up_abandoned(sessions: sessionmaker[Session], max_attempts: int) -> int:
    """Jobs whose lease expired after `max_attempts` claims end as `error`, with a message."""
    now = utcnow()
    with sessions.begin() as session:
        rows = session.execute(
            select(Submission.id, Submission.exercise).where(
                Submission.status == Status.RUNNING,
                Submission.lease_expires_at < now,
                Submission.attempts >= max_attempts,
            )
        ).all()
        for job_id, exercise in rows:
            session.execute(
                update(Submission)
                .where(
                    Submission.id == job_id,
                    Submission.status == Status.RUNNING,
                    Submission.lease_expires_at < now,
                )
                .values(
                    status=Status.ERROR,
                    finished_at=now,
                    active_owner=None,
                    lease_owner=None,
                    lease_expires_at=None,
                    verdict=trouble(exercise, "worker-trouble"),
                )
                .execution_options(synchronize_session=False)
            )
    return len(rows)
