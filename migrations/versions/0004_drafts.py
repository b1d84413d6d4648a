"""drafts: the code a learner is writing, one row per learner and exercise

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "drafts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("visitor_id", sa.String(length=64), nullable=False),
        sa.Column("exercise", sa.String(length=120), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drafts")),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_drafts_user_id_users"), ondelete="CASCADE"
        ),
    )
    op.create_index(op.f("ix_drafts_exercise"), "drafts", ["exercise"])
    op.create_index(op.f("ix_drafts_user_id"), "drafts", ["user_id"])
    op.create_index(op.f("ix_drafts_visitor_id"), "drafts", ["visitor_id"])


def downgrade() -> None:
    op.drop_table("drafts")
