"""One grading worker: claim a job, grade it in the sandbox while renewing its lease, store the
verdict; sleep until woken (PostgreSQL NOTIFY) or the poll interval passes. SIGTERM lets the
current job finish, then the loop ends."""

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

import app.models  # noqa: F401  (every owned table, for retention.prune to walk)
from app import logs
from app.accounts import retention
from app.config import Settings
from app.db import make_engine, utcnow
from app.submissions import queue
from app.submissions.workers import WorkerBeat
from contracts.exercise import Catalog, load_exercises
from contracts.verdict import Record, trouble
from worker.sandbox import Cancel

log = logging.getLogger("treino.worker")

Grade = Callable[..., Record]  # Grader.grade: (exercise, code, *, run_only=False, cancel=None)


BEAT_EVERY = 10.0  # seconds between heartbeats while idle; /readyz wants one within a minute
PRUNE_EVERY = 3600.0  # seconds between two prunes of anonymous data unused for ANONYMOUS_DAYS
CANCEL_SECONDS = 1.0  # how soon a cancelled job's sandbox is stopped


class Worker:
    def __init__(
        self,
        settings: Settings,
        grade: Grade,
        course: Catalog | None = None,
        *,
        isolation: str = "process",
        device: str = "cpu",
        warm: Callable[[], int] = lambda: 0,
        limits: str = "cgroup",
    ) -> None:
        self.settings = settings
        self.isolation, self.device, self.warm, self.limits = isolation, device, warm, limits
        self._last_beat = 0.0
        self._last_prune = time.monotonic() - PRUNE_EVERY  # the first at start
        self.course = course or load_exercises(settings.lessons_dir)
        self.engine = make_engine(settings.database_url)
        self.sessions: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)
        self.name = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.lease = timedelta(seconds=settings.lease_seconds)
        self.stopping = threading.Event()
        self.grade = grade

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        log.info("worker %s started", self.name)
        with self._waker() as wait:
            while not self.stopping.is_set():
                try:
                    if time.monotonic() - self._last_beat > BEAT_EVERY:
                        self.beat(busy=False)
                    if time.monotonic() - self._last_prune > PRUNE_EVERY:
                        self.prune()
                    handled = self.run_once()
                except Exception:  # the database went away: say so, wait, carry on
                    log.exception("worker %s: queue unavailable", self.name)
                    handled = False
                if not handled:
                    wait()
        with self.sessions.begin() as session:  # gone: /readyz and /metrics stop counting it
            session.execute(delete(WorkerBeat).where(WorkerBeat.name == self.name))
        log.info("worker %s stopped", self.name)

    def beat(self, busy: bool) -> None:
        """Say this worker is alive, how it isolates code, on which device, how many are warm."""
        with self.sessions.begin() as session:
            session.merge(
                WorkerBeat(
                    name=self.name,
                    isolation=self.isolation,
                    device=self.device,
                    warm=self.warm(),
                    busy=int(busy),
                    limits=self.limits,
                    seen_at=utcnow(),
                )
            )
        self._last_beat = time.monotonic()

    def prune(self) -> None:
        """Anonymous visitors' rows unused for TREINO_ANONYMOUS_DAYS go (app/accounts/retention.py),
        a batch of visitors per transaction, between two jobs."""
        self._last_prune = time.monotonic()
        before = utcnow() - timedelta(days=self.settings.anonymous_days)
        gone = 0
        while not self.stopping.is_set():
            with self.sessions.begin() as session:
                if not (pruned := retention.prune(session, before)):
                    break
            gone += pruned
        if gone:
            log.info(
                "pruned the rows of %d visitors without an account, unused since %s", gone, before.date()
            )

    def run_once(self) -> bool:
        """Grade one job if there is one; True when a job was handled. Whatever the job did,
        it ends with a verdict stored (or, if even that fails, left to its lease)."""
        job = queue.claim(self.sessions, self.name, self.lease, self.settings.max_attempts)
        if job is None:
            return False
        logs.bind(job.request_id)  # the web request's id follows the job into the worker's logs
        self.beat(busy=True)
        log.info("job %s claimed (%s, attempt %d)", job.id, job.exercise, job.attempts)
        cancel = Cancel()
        try:
            with self._heartbeat(job.id, cancel):
                verdict = self._grade(job, cancel)
        finally:
            cancel.close()
        self._finish(job, verdict)
        return True

    def _finish(self, job: queue.Job, verdict: Record) -> None:
        try:
            stored = queue.finish(self.sessions, job.id, self.name, verdict)
        except Exception:  # the database refused this verdict: the job still ends, as ours
            log.exception("job %s: verdict not stored", job.id)
            try:
                stored = queue.finish(
                    self.sessions, job.id, self.name, trouble(job.exercise, "verdict-refused")
                )
            except Exception:  # the database is away: the lease runs out, the job is tried again
                log.exception("job %s: left to its lease", job.id)
                return
        if stored:
            log.info("job %s finished: %s", job.id, verdict["status"])
        else:
            log.warning("job %s: no longer ours (cancelled, or the lease was lost): verdict dropped", job.id)

    def _grade(self, job: queue.Job, cancel: Cancel) -> Record:
        exercise = self.course.exercise(job.exercise)
        if exercise is None:
            return trouble(job.exercise, "exercise-gone")
        code = job.code.encode("utf-8", "surrogatepass")
        try:
            if job.mode == "run":  # run and measure, not graded: the page says "Ran"
                return {**self.grade(exercise, code, run_only=True, cancel=cancel), "mode": "run"}
            return self.grade(exercise, code, cancel=cancel)
        except Exception:  # a bug of ours must not lose the job: it ends as error, with a reason
            log.exception("job %s: grading crashed", job.id)
            return trouble(job.exercise, "grader-crashed")

    # ------------------------------------------------------------ plumbing

    @contextmanager
    def _heartbeat(self, job_id: int, cancel: Cancel):
        """Renew the job's lease while it runs; once the row is no longer this worker's running
        job (the learner cancelled it, or the lease went to another worker), stop the job."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(min(self.lease.total_seconds() / 3, CANCEL_SECONDS)):
                try:
                    ours = queue.renew(self.sessions, job_id, self.name, self.lease)
                except Exception:  # the database is away for a moment: try again
                    log.warning("job %s: lease not renewed", job_id, exc_info=True)
                    continue
                if not ours:
                    log.info("job %s: no longer ours, stopping it", job_id)
                    cancel.set()
                    return

        thread = threading.Thread(target=beat, name=f"lease-{job_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    @contextmanager
    def _waker(self):
        """A wait() that returns on NOTIFY (PostgreSQL), on a write to the database's files
        (SQLite: ``queue.Written``), on stop, or after the poll interval."""
        poll = self.settings.poll_seconds
        url = make_url(self.settings.database_url)
        if url.get_backend_name() != "postgresql":
            written = queue.Written.of(url)
            if written is None:
                yield lambda: self.stopping.wait(poll)
                return

            def look() -> None:
                deadline = time.monotonic() + poll
                while not written.changed() and not self.stopping.is_set():
                    if (left := deadline - time.monotonic()) <= 0:
                        return
                    self.stopping.wait(min(left, queue.WRITTEN_SECONDS))

            yield look
            return
        import psycopg

        conn = psycopg.connect(
            url.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True
        )
        try:
            conn.execute(f"LISTEN {queue.CHANNEL}")

            def wait() -> None:  # in short slices, so stop() is seen within a second
                deadline = time.monotonic() + poll
                while not self.stopping.is_set() and (left := deadline - time.monotonic()) > 0:
                    if list(conn.notifies(timeout=min(left, 1.0), stop_after=1)):
                        return

            yield wait
        finally:
            conn.close()

    def stop(self, *_args: object) -> None:
        self.stopping.set()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.engine.dispose()


def main(settings: Settings) -> int:
    from worker import sandbox
    from worker.grading import Grader  # torch-side imports only in the worker

    with (
        Grader.running(settings) as grader,
        Worker(
            settings,
            grader.grade,
            isolation=grader.setup.isolation,
            device=grader.device,
            warm=grader.pool.warm,
            limits="cgroup" if sandbox.Cgroup.available() else "watchdog",
        ) as worker,
    ):
        grader.prepare(list(worker.course.exercises))  # while the pool warms up
        log.info(
            "worker %s: sandbox %s, device %s, %d warm",
            worker.name,
            grader.setup.isolation,
            grader.device,
            settings.pool_size,
        )
        signal.signal(signal.SIGTERM, worker.stop)
        signal.signal(signal.SIGINT, worker.stop)
        worker.run()
    return 0
