"""Operations endpoints: alive, ready (database, migrations, a worker), Prometheus metrics."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from app.db import utcnow
from app.submissions.models import Status, Submission
from app.submissions.workers import WorkerBeat

API_URL = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"


def _beat(app, **fields) -> None:
    with app.state.sessionmaker.begin() as session:
        session.merge(
            WorkerBeat(
                **{
                    "name": "w1",
                    "isolation": "bwrap",
                    "device": "cpu",
                    "warm": 2,
                    "busy": 0,
                    "seen_at": utcnow(),
                    **fields,
                }
            )
        )


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_needs_a_worker_seen_recently(db_client, db_app):
    response = db_client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "database": True,
        "migrations": True,
        "worker": False,
        "job_limits": None,
        "tutor": "absent",
    }
    _beat(db_app, seen_at=utcnow() - timedelta(minutes=5))
    assert db_client.get("/readyz").status_code == 503, "a stale heartbeat is not a worker"
    _beat(db_app)
    assert db_client.get("/readyz").json() == {
        "ready": True,
        "database": True,
        "migrations": True,
        "worker": True,
        "job_limits": "cgroup",
        "tutor": "absent",
    }


def test_readyz_and_metrics_say_when_a_worker_has_no_cgroup(db_client, db_app):
    _beat(db_app, limits="watchdog")
    ready = db_client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["job_limits"] == "watchdog"
    assert _metric(db_client.get("/metrics").text, "treino_workers_without_cgroup") == 1


def _metric(text: str, name: str) -> float:
    [value] = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


def test_metrics_report_the_queue_verdicts_latency_and_workers(db_client, db_app):
    from tests.submissions.test_routes import grade_all

    assert db_client.post(API_URL, json={"code": "x"}).status_code == 202
    text = db_client.get("/metrics").text
    assert _metric(text, "treino_queue_depth") == 1
    assert _metric(text, 'treino_verdicts_total{status="passed"}') == 0
    grade_all(db_app)
    _beat(db_app, device="cuda:0", busy=1, warm=3)
    text = db_client.get("/metrics").text
    assert _metric(text, "treino_queue_depth") == 0
    assert _metric(text, 'treino_verdicts_total{status="passed"}') == 1
    assert _metric(text, "treino_grading_latency_seconds_count") == 1
    assert _metric(text, 'treino_grading_latency_seconds_bucket{le="+Inf"}') == 1
    assert _metric(text, 'treino_workers{isolation="bwrap"}') == 1
    assert _metric(text, "treino_warm_pool_size") == 3
    assert _metric(text, "treino_gpus_in_use") == 1


def _graded(app, latencies: list[float]) -> None:
    """Final submissions, each taking its latency from submission to verdict."""
    now = utcnow()
    with app.state.sessionmaker.begin() as session:
        session.add_all(
            Submission(
                exercise="gradient-accumulation/accumulate",
                code="x",
                lang="en",
                visitor_id="v",
                status=Status.PASSED,
                created_at=now - timedelta(seconds=seconds),
                finished_at=now,
            )
            for seconds in latencies
        )


@contextmanager
def _submission_reads() -> Iterator[dict[str, int]]:
    """The statements sent within the block that read the submissions table, and the rows they
    return (each run again on a cursor of its own, to count them)."""
    seen = {"statements": 0, "rows": 0}

    def after(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "submissions" in statement:
            again = cursor.connection.cursor()
            again.execute(statement, parameters)
            seen["statements"] += 1
            seen["rows"] += len(again.fetchall())
            again.close()

    event.listen(Engine, "after_cursor_execute", after)
    try:
        yield seen
    finally:
        event.remove(Engine, "after_cursor_execute", after)


def test_the_latency_histogram_is_counted_by_the_database_in_the_same_reads_however_many_rows(
    db_client, db_app
):
    _graded(db_app, [0.5, 3, 45, 400])
    with _submission_reads() as few:
        text = db_client.get("/metrics").text
    bucket = 'treino_grading_latency_seconds_bucket{{le="{}"}}'.format
    assert [_metric(text, bucket(le)) for le in ("1", "2", "5", "60", "300", "+Inf")] == [1, 1, 2, 3, 3, 4]
    assert _metric(text, "treino_grading_latency_seconds_sum") == pytest.approx(448.5, abs=0.002)
    assert _metric(text, "treino_grading_latency_seconds_count") == 4
    assert few["statements"] > 0

    _graded(db_app, [9.0] * 200)
    with _submission_reads() as many:
        text = db_client.get("/metrics").text
    assert _metric(text, "treino_grading_latency_seconds_count") == 204
    assert _metric(text, bucket("10")) == 202 and _metric(text, bucket("5")) == 2
    assert _metric(text, 'treino_verdicts_total{status="passed"}') == 204
    assert many == few  # the same statements and rows for 204 finished submissions as for 4
    assert many["rows"] <= len(Status) + 1  # a row per status, and the histogram's one


def test_the_exercise_page_says_plainly_when_code_is_not_isolated_or_nobody_grades(client, app):
    from tests.conftest import html

    def notice():
        found = html(client.get("/lessons/gradient-accumulation/exercises/accumulate")).select(".notice.warn")
        return found[0].get_text(" ", strip=True) if found else None

    assert notice().startswith("No grading worker is running right now")
    _beat(app, isolation="process")
    assert notice().startswith("On this server your code is not isolated")
    _beat(app, isolation="bwrap")
    assert notice() is None
