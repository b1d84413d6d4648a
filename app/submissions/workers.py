"""The grading workers, as the web sees them: each one's heartbeat row (written by
worker/runner.py), and what the submission pages, /readyz and /metrics make of the live ones."""

from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import DateTime, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from app.db import Base, utcnow

FRESH = timedelta(seconds=60)  # a worker heard from within this is live


class WorkerBeat(Base):
    """What each grading worker last said about itself."""

    __tablename__ = "worker_beats"

    name: Mapped[str] = mapped_column(String(80), primary_key=True)
    isolation: Mapped[str] = mapped_column(String(16))  # bwrap | process
    device: Mapped[str] = mapped_column(String(16))  # cpu | cuda:N
    warm: Mapped[int] = mapped_column(Integer, default=0)
    busy: Mapped[int] = mapped_column(Integer, default=0)  # 1 while grading a job
    # how a job's whole tree is held to its memory: "cgroup", or "watchdog" (the worker sums
    # the tree's memory itself: no cgroup could be made, e.g. in a container without one)
    limits: Mapped[str] = mapped_column(String(16), default="cgroup", server_default="cgroup")
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def live(session: Session) -> list[WorkerBeat]:
    """The workers heard from in the last minute."""
    return list(session.scalars(select(WorkerBeat).where(WorkerBeat.seen_at > utcnow() - FRESH)))


def job_limits(workers: list[WorkerBeat]) -> Literal["cgroup", "watchdog"] | None:
    """How live workers hold a job's whole tree to its memory: "cgroup" when every one has a
    cgroup, "watchdog" when any sums the tree's memory itself (no cgroup could be made: weaker,
    a fast allocation can overshoot between two looks); None when no worker is live."""
    if not workers:
        return None
    return "watchdog" if any(w.limits == "watchdog" for w in workers) else "cgroup"


def grading_notice(session: Session) -> str | None:
    """What a learner should know before sending code: "not-isolated" when a live worker runs
    code without a sandbox, "no-worker" when none is running; None when all is well."""
    workers = live(session)
    if not workers:
        return "no-worker"
    return "not-isolated" if any(w.isolation == "process" for w in workers) else None
