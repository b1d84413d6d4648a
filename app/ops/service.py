"""Operations: liveness, readiness and the figures Prometheus scrapes, all from the database so
every web replica answers the same."""

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.db import alembic_config
from app.prometheus import family, histogram, seconds_between
from app.submissions import workers
from app.submissions.models import Status, Submission

LATENCY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300)


def readiness(session: Session, database_url: str) -> dict[str, bool]:
    """Each condition for taking traffic: database reachable, schema current, a worker alive."""
    checks = {"database": False, "migrations": False, "worker": False}
    try:
        session.execute(text("SELECT 1"))
    except Exception:  # any driver error means not ready; the reason is in the server log
        return checks
    checks["database"] = True
    head = ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
    current = MigrationContext.configure(session.connection()).get_current_revision()
    checks["migrations"] = current == head
    checks["worker"] = bool(workers.live(session))
    return checks


def metrics(session: Session) -> str:
    """Prometheus text exposition, from aggregates: a scrape reads a row per status and per live
    worker, never the submissions themselves."""
    by_status = dict(
        session.execute(select(Submission.status, func.count()).group_by(Submission.status)).all()
    )
    lines = family("treino_queue_depth", "gauge", "Submissions waiting to be graded.")
    lines.append(f"treino_queue_depth {by_status.get(Status.QUEUED, 0)}")
    lines += family("treino_submissions_running", "gauge", "Submissions being graded now.")
    lines.append(f"treino_submissions_running {by_status.get(Status.RUNNING, 0)}")
    lines += family("treino_verdicts_total", "counter", "Final verdicts, by status.")
    for status in Status:
        if status.final:
            lines.append(f'treino_verdicts_total{{status="{status}"}} {by_status.get(status, 0)}')

    lines += histogram(
        session,
        "treino_grading_latency_seconds",
        "From submission to verdict, for every final submission.",
        seconds_between(session, Submission.created_at, Submission.finished_at),
        Submission.finished_at.is_not(None),
        LATENCY_BUCKETS,
    )

    fresh = workers.live(session)
    lines += family("treino_workers", "gauge", "Workers seen in the last minute, by sandbox isolation.")
    for isolation in ("bwrap", "process"):
        lines.append(
            f'treino_workers{{isolation="{isolation}"}} {sum(1 for w in fresh if w.isolation == isolation)}'
        )
    lines += family(
        "treino_workers_without_cgroup",
        "gauge",
        "Workers that cannot put jobs in a cgroup (memory watched by the worker instead).",
    )
    lines.append(f"treino_workers_without_cgroup {sum(1 for w in fresh if w.limits == 'watchdog')}")
    lines += family("treino_warm_pool_size", "gauge", "Warm sandboxes ready, over all workers.")
    lines.append(f"treino_warm_pool_size {sum(w.warm for w in fresh)}")
    lines += family("treino_gpus_in_use", "gauge", "GPUs grading a job now.")
    lines.append(f"treino_gpus_in_use {sum(w.busy for w in fresh if w.device.startswith('cuda'))}")
    return "\n".join(lines) + "\n"
