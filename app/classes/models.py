"""A class: a teacher's group of learners, and who is in it (teachers and learners alike)."""

from datetime import datetime
from enum import StrEnum

from sqlalchemy import DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, utcnow


class Role(StrEnum):
    TEACHER = "teacher"  # sees the class's report; a class may have several
    LEARNER = "learner"  # seen by the teachers while a member


class Classroom(Base):
    """A class. Its two codes are the secret parts of its invitations: `join_code` makes a
    learner, `teacher_code` another teacher; renewing them ends the old links."""

    __tablename__ = "classes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    course: Mapped[str] = mapped_column(String(120), default="")  # what it is part of, said by the teacher
    join_code: Mapped[str] = mapped_column(String(32), unique=True)
    teacher_code: Mapped[str] = mapped_column(String(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Member(Base):
    """An account in a class, as a teacher or a learner (one role per class). A learner who
    leaves, or is removed, loses this row: from then on the class's report reads nothing of them.
    Deleting the account deletes it too (ON DELETE CASCADE)."""

    __tablename__ = "class_members"
    __table_args__ = (UniqueConstraint("class_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    class_id: Mapped[int] = mapped_column(ForeignKey("classes.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(10))
    name: Mapped[str] = mapped_column(String(80))  # as the teachers see them, chosen on joining
    joined_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
