"""accounts: users, their sessions and API tokens, sign-in throttling, cards reached; quiz
attempts gain an owner account

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _owner_columns() -> list[sa.Column]:
    return [
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("visitor_id", sa.String(length=64), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("lang", sa.String(length=8), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_user_sessions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_user_sessions_token_hash")),
    )
    op.create_index(op.f("ix_user_sessions_user_id"), "user_sessions", ["user_id"])
    op.create_table(
        "throttle_hits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=120), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_throttle_hits")),
    )
    op.create_index(op.f("ix_throttle_hits_key"), "throttle_hits", ["key"])
    op.create_table(
        "cards_reached",
        sa.Column("id", sa.Integer(), nullable=False),
        *_owner_columns(),
        sa.Column("lesson", sa.String(length=80), nullable=False),
        sa.Column("card", sa.Integer(), nullable=False),
        sa.Column("reached_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_cards_reached_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cards_reached")),
    )
    op.create_index(op.f("ix_cards_reached_user_id"), "cards_reached", ["user_id"])
    op.create_index(op.f("ix_cards_reached_visitor_id"), "cards_reached", ["visitor_id"])
    with op.batch_alter_table("quiz_attempts") as batch:
        batch.add_column(sa.Column("user_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_quiz_attempts_user_id_users"), "users", ["user_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index(op.f("ix_quiz_attempts_user_id"), ["user_id"])


def downgrade() -> None:
    with op.batch_alter_table("quiz_attempts") as batch:
        batch.drop_index(op.f("ix_quiz_attempts_user_id"))
        batch.drop_constraint(op.f("fk_quiz_attempts_user_id_users"), type_="foreignkey")
        batch.drop_column("user_id")
    op.drop_table("cards_reached")
    op.drop_table("throttle_hits")
    op.drop_table("user_sessions")
    op.drop_table("users")
