"""submissions: the learner's code, its verdict, and the job fields of the queue

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("visitor_id", sa.String(length=64), nullable=False),
        sa.Column("exercise", sa.String(length=120), nullable=False),
        sa.Column("mode", sa.String(length=10), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("lang", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("verdict", sa.JSON(), nullable=True),
        sa.Column("active_owner", sa.String(length=80), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=80), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("request_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_submissions_user_id_users"), ondelete="CASCADE"
        ),
        sa.UniqueConstraint("active_owner", name=op.f("uq_submissions_active_owner")),
    )
    op.create_index("ix_submissions_status_id", "submissions", ["status", "id"])
    op.create_index(op.f("ix_submissions_user_id"), "submissions", ["user_id"])
    op.create_index(op.f("ix_submissions_visitor_id"), "submissions", ["visitor_id"])


def downgrade() -> None:
    op.drop_table("submissions")
