"""The queue on SQLite and PostgreSQL: each job graded once, leases, attempts, shutdown."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import sessionmaker

from app.accounts.ownership import Learner
from app.config import ROOT, Settings
from app.db import make_engine
from app.lessons.course import load_course
from app.submissions import queue
from app.submissions.models import Mode, Status, Submission
from app.submissions.queue import AlreadyActive, QueueOrder, enqueue, queue_position
from contracts.verdict import Record, record
from tests.conftest import LESSONS
from worker.runner import Worker

COURSE = load_course(LESSONS)
EXERCISE = COURSE.exercise("gradient-accumulation/accumulate")
LEASE = timedelta(seconds=30)


def fake_verdict(exercise, code: bytes, run_only: bool = False, cancel=None) -> Record:
    return record(exercise.id, "passed", metrics={"graded_by": os.getpid()}, output=code.decode())


@pytest.fixture
def sessions(database_url):
    engine = make_engine(database_url)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


def _enqueue(sessions, n: int, code: str = "pass") -> list[int]:
    ids = []
    for i in range(n):
        with sessions.begin() as session:
            sub = enqueue(
                session,
                Learner(f"visitor-{i}-{time.monotonic_ns()}"),
                EXERCISE,
                f"{code} {i}",
                mode=Mode.SUBMIT,
                lang="en",
            )
            ids.append(sub.id)
    return ids


def _rows(sessions) -> list[Submission]:
    with sessions() as session:
        return list(session.scalars(select(Submission).order_by(Submission.id)))


def test_concurrent_claims_take_each_job_exactly_once(sessions):
    engine = sessions.kw["bind"]
    if engine.dialect.name == "sqlite":  # 4 threads take turns at SQLite's one write lock: on a loaded
        # machine one waited past the app's 5 s busy timeout ("database is locked"); exactly-once is
        # what is tested here, not how fast the lock comes round
        event.listen(engine, "connect", lambda conn, _record: conn.execute("PRAGMA busy_timeout=120000"))
    ids = _enqueue(sessions, 30)
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        while (job := queue.claim(sessions, name, LEASE, 3)) is not None:
            with lock:
                claimed.append(job.id)
            assert queue.finish(sessions, job.id, name, {"status": "passed"})

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == ids and Counter(claimed).most_common(1)[0][1] == 1
    assert {r.status for r in _rows(sessions)} == {"passed"}
    assert {r.active_owner for r in _rows(sessions)} == {None}


def test_one_active_submission_per_learner(sessions):
    me = Learner("me")
    with sessions.begin() as session:
        enqueue(session, me, EXERCISE, "a", mode=Mode.SUBMIT, lang="en")
    with sessions.begin() as session, pytest.raises(AlreadyActive):
        enqueue(session, me, EXERCISE, "b", mode=Mode.SUBMIT, lang="en")
    job = queue.claim(sessions, "w", LEASE, 3)
    queue.finish(sessions, job.id, "w", {"status": "failed"})
    with sessions.begin() as session:  # once final, the learner may submit again
        enqueue(session, me, EXERCISE, "c", mode=Mode.SUBMIT, lang="en")


def test_clients_are_served_in_turn(sessions):
    """Five cookie-less learners from one address, then one learner from another: the second
    address waits for one job, not five."""

    def send(client: str) -> int:
        with sessions.begin() as session:
            return enqueue(
                session,
                Learner(f"visitor-{time.monotonic_ns()}"),
                EXERCISE,
                "x",
                mode=Mode.SUBMIT,
                lang="en",
                client=client,
            ).id

    flood = [send("203.0.113.7") for _ in range(5)]
    honest = send("198.51.100.2")
    with sessions() as session:  # the page's position is the order the workers claim in
        assert queue_position(session, session.get(Submission, honest)) == 6
    first = queue.claim(sessions, "w", LEASE, 3)
    assert first is not None and first.id == flood[0]
    assert queue.finish(sessions, first.id, "w", {"status": "passed"})
    with sessions() as session:
        assert queue_position(session, session.get(Submission, honest)) == 1
        assert queue_position(session, session.get(Submission, flood[1])) == 2
    order = [first.id]
    while (job := queue.claim(sessions, "w", LEASE, 3)) is not None:
        order.append(job.id)
        assert queue.finish(sessions, job.id, "w", {"status": "passed"})
    assert order == [flood[0], honest, *flood[1:]]


def test_queue_position_counts_the_jobs_ahead(sessions):
    ids = _enqueue(sessions, 3)
    with sessions() as session:
        assert [queue_position(session, session.get(Submission, i)) for i in ids] == [1, 2, 3]
    queue.claim(sessions, "w", LEASE, 3)
    with sessions() as session:
        assert [queue_position(session, session.get(Submission, i)) for i in ids] == [None, 1, 2]


def test_polls_share_the_queue_order_and_still_see_a_new_job_at_once(sessions, monkeypatch):
    """A class polling its places: one read of the queue's order serves every poll for a
    moment, yet a job queued since is placed at once, and the places move on once they age."""
    order = QueueOrder()
    ids = _enqueue(sessions, 3)
    reads = []
    with sessions() as session:
        event.listen(session.get_bind(), "before_cursor_execute", lambda *a: reads.append(a[2]))
        assert [order.position(session, session.get(Submission, i)) for i in ids] == [1, 2, 3]
        assert [order.position(session, session.get(Submission, i)) for i in ids] == [1, 2, 3]
        assert sum("ORDER BY" in statement for statement in reads) == 1
    [late] = _enqueue(sessions, 1)
    with sessions() as session:
        assert order.position(session, session.get(Submission, late)) == 4
    queue.claim(sessions, "w", LEASE, 3)
    monkeypatch.setattr(QueueOrder, "MAX_AGE", 0.0)
    with sessions() as session:
        assert [order.position(session, session.get(Submission, i)) for i in [*ids, late]] == [
            None,
            1,
            2,
            3,
        ]


def test_a_poll_that_finds_the_queue_emptied_since_its_job_was_read_gets_no_place(sessions):
    """The page polls a job it read as queued; a worker claims it (and every other) before the
    places are read: the answer is no place, not a 500 (it was one: make bench's resubmit row
    on PostgreSQL, whose worker claims at once)."""
    [job_id] = _enqueue(sessions, 1)
    with sessions() as session:
        read_queued = session.get(Submission, job_id)
        assert read_queued.status == Status.QUEUED
        queue.claim(sessions, "w", LEASE, 3)
        assert QueueOrder().position(session, read_queued) is None


def test_an_expired_lease_is_claimed_again_and_the_old_worker_cannot_finish(sessions):
    [job_id] = _enqueue(sessions, 1)
    first = queue.claim(sessions, "dead", timedelta(seconds=-1), 3)  # already expired
    second = queue.claim(sessions, "alive", LEASE, 3)
    assert first.id == second.id == job_id and second.attempts == 2
    assert not queue.renew(sessions, job_id, "dead", LEASE)
    assert not queue.finish(sessions, job_id, "dead", {"status": "failed"})
    assert queue.finish(sessions, job_id, "alive", {"status": "passed"})
    assert [(r.status, r.verdict) for r in _rows(sessions)] == [("passed", {"status": "passed"})]


def test_after_the_attempts_cap_the_job_ends_as_error_with_a_reason(sessions):
    [job_id] = _enqueue(sessions, 1)
    for _ in range(3):
        assert queue.claim(sessions, "dying", timedelta(seconds=-1), 3).id == job_id
    assert queue.claim(sessions, "w", LEASE, 3) is None
    [row] = _rows(sessions)
    assert row.status == Status.ERROR and row.verdict["reason"] == "worker-trouble"
    assert row.active_owner is None


def _settings(url: str, **extra) -> Settings:
    return Settings(database_url=url, lessons_dir=LESSONS, _env_file=None, **extra)


def test_worker_grades_jobs_and_stores_verdicts(sessions, database_url):
    ids = _enqueue(sessions, 2)
    with Worker(_settings(database_url), grade=fake_verdict, course=COURSE) as worker:
        assert worker.run_once() and worker.run_once() and not worker.run_once()
    rows = _rows(sessions)
    assert [r.id for r in rows] == ids and {r.status for r in rows} == {"passed"}
    assert rows[0].verdict["output"] == "pass 0"


def test_a_grader_crash_ends_the_job_as_error_not_lost(sessions, database_url):
    _enqueue(sessions, 1)

    def crash(*_args, **_kwargs):
        raise RuntimeError("bug in the checks")

    with Worker(_settings(database_url), grade=crash, course=COURSE) as worker:
        worker.run_once()
    [row] = _rows(sessions)
    assert row.status == "error" and row.verdict["reason"] == "grader-crashed"


def test_a_verdict_no_database_stores_ends_the_job_as_error_and_the_next_is_graded(sessions, database_url):
    _enqueue(sessions, 2)

    def nan_first(exercise, code, run_only=False, cancel=None):
        verdict = fake_verdict(exercise, code)
        if code.endswith(b"0"):
            verdict["metrics"]["update_ratio"] = float("nan")  # PostgreSQL refuses NaN in JSON
        return verdict

    with Worker(_settings(database_url), grade=nan_first, course=COURSE) as worker:
        assert worker.run_once() and worker.run_once()
    first, second = _rows(sessions)
    assert (first.status, first.verdict["reason"]) == ("error", "verdict-refused")
    assert second.status == "passed"


def test_a_cancelled_job_is_stopped_and_its_row_stays_cancelled(sessions, database_url):
    from app.submissions.queue import cancel as cancel_submission

    [job_id] = _enqueue(sessions, 1)
    seen = threading.Event()

    def waits_for_cancel(exercise, code, run_only=False, cancel=None):
        seen.set()
        import select as select_module

        stopped = select_module.select([cancel], [], [], 30)[0]  # the sandbox waits like this
        return {**fake_verdict(exercise, code), "output": "stopped" if stopped else "ran on"}

    worker = Worker(_settings(database_url), grade=waits_for_cancel, course=COURSE)
    thread = threading.Thread(target=worker.run_once)
    started = time.monotonic()
    thread.start()
    assert seen.wait(30)
    with sessions.begin() as session:
        submission = session.get(Submission, job_id)
        cancel_submission(session, submission)
        assert submission.status == "cancelled"  # at once, while the worker still runs it
    thread.join(timeout=30)
    worker.__exit__()
    assert time.monotonic() - started < 20, "the job ran on after it was cancelled"
    [row] = _rows(sessions)
    assert row.status == "cancelled" and row.verdict is None


WORKER_SCRIPT = """
import sys, time
from app.config import Settings
from tests.conftest import LESSONS
from contracts.verdict import record
from worker import runner

def slow(exercise, code, run_only=False, cancel=None):
    print("grading", flush=True)
    time.sleep(float(sys.argv[2]))
    return record(exercise.id, "failed", output="slow")

settings = Settings(database_url=sys.argv[1], lessons_dir=LESSONS, lease_seconds=1.0,
                    poll_seconds=0.2, _env_file=None)
import signal
with runner.Worker(settings, grade=slow) as w:
    signal.signal(signal.SIGTERM, w.stop)
    w.run()
print("stopped", flush=True)
"""


def _spawn_worker(url: str, grade_seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, url, str(grade_seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "grading"
    return proc


def test_a_worker_killed_mid_job_loses_nothing(sessions, database_url):
    [job_id] = _enqueue(sessions, 1)
    proc = _spawn_worker(database_url, 60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert _rows(sessions)[0].status == "running"
    with Worker(_settings(database_url), grade=fake_verdict, course=COURSE) as worker:
        deadline = time.monotonic() + 30
        while not worker.run_once():  # claimable again once the dead worker's 1 s lease runs out
            assert time.monotonic() < deadline, "the dead worker's job was never claimed again"
            time.sleep(0.05)
    [row] = _rows(sessions)
    assert (row.id, row.status, row.attempts) == (job_id, "passed", 2)


def test_sigterm_lets_the_current_job_finish_then_exits(sessions, database_url):
    _enqueue(sessions, 2)
    proc = _spawn_worker(database_url, 1.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "stopped"
    rows = _rows(sessions)
    assert [r.status for r in rows] == ["failed", "queued"], "finished one, left the next queued"


def test_a_write_wakes_an_idle_worker_before_its_poll_interval(database_url):
    """NOTIFY on PostgreSQL; on SQLite the write seen on the database's files (queue.Written)."""
    worker = Worker(_settings(database_url, poll_seconds=60), grade=fake_verdict, course=COURSE)
    polled, poll = threading.Event(), worker.run_once

    def run_once() -> bool:
        handled = poll()
        polled.set()
        return handled

    worker.run_once = run_once
    thread = threading.Thread(target=lambda: worker.__enter__().run())
    thread.start()
    try:  # LISTEN comes before the first poll: once that found nothing, only NOTIFY wakes it
        assert polled.wait(30), "the worker never polled"
        engine = make_engine(database_url)
        factory = sessionmaker(engine, expire_on_commit=False)
        time.sleep(0.3)  # idle: past the looks that follow its own first poll
        [job_id] = _enqueue(factory, 1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _rows(factory)[0].status != "passed":
            time.sleep(0.05)
        assert _rows(factory)[0].status == "passed", "not woken by the write within 20 s (poll is 60 s)"
        engine.dispose()
    finally:
        worker.stop()
        thread.join(timeout=10)
        worker.__exit__()
    assert job_id


def test_a_worker_reports_itself_while_it_runs_and_leaves_when_it_stops(sessions, database_url):
    from app.submissions.workers import WorkerBeat

    def beats():
        with sessions() as session:
            return [(b.isolation, b.device, b.warm) for b in session.scalars(select(WorkerBeat))]

    with Worker(
        _settings(database_url, poll_seconds=0.05),
        grade=fake_verdict,
        course=COURSE,
        isolation="bwrap",
        device="cpu",
        warm=lambda: 2,
    ) as worker:
        thread = threading.Thread(target=worker.run)
        thread.start()
        deadline = time.monotonic() + 10
        while not beats() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert beats() == [("bwrap", "cpu", 2)]
        worker.stop()
        thread.join(timeout=10)
    assert beats() == []


def _simulate_flood(sessions, monkeypatch, attacker_client) -> float:
    """The queue-jumping scenario of issue 25, on a simulated clock and one worker: an honest
    learner served once before sends a 0.2 s job at t=10 s; an anonymous program that sleeps
    through its 60 s wall clock sends a job every 20 s from t=1 s, each from a fresh address
    (`attacker_client(n)` names it), nine in all. Returns the honest job's wait, in seconds."""
    t0 = queue.utcnow()
    clock = [0.0]
    monkeypatch.setattr(queue, "utcnow", lambda: t0 + timedelta(seconds=clock[0]))

    def send(client: str, at: float) -> int:
        with sessions.begin() as session:
            sub = enqueue(session, Learner(f"v-{at}-{client}"), EXERCISE, "x", mode=Mode.SUBMIT, lang="en")
            sub.client, sub.created_at = client, t0 + timedelta(seconds=at)
            return sub.id

    honest = "198.51.100.2"
    arrivals = sorted(
        [(0.0, honest, 0.2), (10.0, honest, 0.2)]
        + [(1.0 + 20 * n, attacker_client(n), 60.0) for n in range(9)]
    )
    durations: dict[int, float] = {}
    started: dict[int, float] = {}
    honest_job = None
    free_at = 0.0
    while arrivals or len(started) < len(durations):
        next_arrival = arrivals[0][0] if arrivals else float("inf")
        if free_at <= next_arrival and len(started) < len(durations):
            clock[0] = free_at  # the worker is free and something waits: it claims
            job = queue.claim(sessions, "w", LEASE, 3)
            assert job is not None
            started[job.id] = free_at
            free_at += durations[job.id]
            clock[0] = free_at
            assert queue.finish(sessions, job.id, "w", {"status": "passed"})
            continue
        at, client, seconds = arrivals.pop(0)
        clock[0] = at
        job_id = send(client, at)
        durations[job_id] = seconds
        if at == 10.0:
            honest_job = job_id
        free_at = max(free_at, at)
    assert honest_job is not None
    return started[honest_job] + 0.2 - 10.0


def test_fresh_addresses_cannot_jump_ahead_of_a_waiting_learner(sessions, monkeypatch):
    """A client never served ranks by when its job was queued, not ahead of everyone: the honest
    job waits for the attacker's first (running) job only, not for every later one."""
    wait = _simulate_flood(sessions, monkeypatch, lambda n: f"203.0.113.{n + 1}")
    print(f"honest learner's wait with a fresh IPv4 address per attacking job: {wait:.1f} s")
    assert wait <= 60.0 + 0.2 - 9.0, wait  # A1 runs 1..61 s; the honest job is next


def test_a_waiting_page_is_answered_by_the_write_not_by_its_safety_read(database_url):
    """The web's watcher (app/submissions/watch.py) answers a wait when the worker's write lands:
    NOTIFY on PostgreSQL, the database's files on SQLite; its reads without either come only
    every SAFETY_SECONDS, so an answer well within that is the wake's."""
    import asyncio

    from app.submissions import watch

    engine = make_engine(database_url)
    factory = sessionmaker(engine, expire_on_commit=False)
    [job_id] = _enqueue(factory, 1)
    watcher = watch.Watch(database_url)

    async def scenario() -> tuple[str | None, float]:
        waiting = asyncio.create_task(watcher.changed(job_id, "queued", timeout=30))
        await asyncio.sleep(0.5)  # the first read found it queued; now only a wake reads again
        assert not waiting.done(), waiting.done() and waiting.result()
        with factory.begin() as session:
            session.get(Submission, job_id).status = "running"
        written = time.monotonic()
        status = await waiting
        return status, time.monotonic() - written

    try:
        status, took = asyncio.run(scenario())
    finally:
        watcher.close()
        engine.dispose()
    assert status == "running"
    assert took < watch.SAFETY_SECONDS / 2, f"answered {took:.2f} s after the write"
