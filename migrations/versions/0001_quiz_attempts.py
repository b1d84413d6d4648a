"""quiz attempts

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quiz_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("visitor_id", sa.String(length=64), nullable=False),
        sa.Column("lesson", sa.String(length=80), nullable=False),
        sa.Column("question", sa.String(length=80), nullable=False),
        sa.Column("option", sa.String(length=80), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quiz_attempts")),
    )
    op.create_index(op.f("ix_quiz_attempts_visitor_id"), "quiz_attempts", ["visitor_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_quiz_attempts_visitor_id"), table_name="quiz_attempts")
    op.drop_table("quiz_attempts")
