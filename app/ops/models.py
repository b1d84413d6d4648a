from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, utcnow


class WorkerBeat(Base):
    """What each grading worker last said about itself; /readyz and /metrics read it."""

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
