"""classes and class_members: a teacher's view of a class (issue 46)

Revision ID: 0013
Revises: 0012 (tutor reservations)
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "classes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("course", sa.String(length=120), nullable=False),
        sa.Column("join_code", sa.String(length=32), nullable=False),
        sa.Column("teacher_code", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_classes")),
        sa.UniqueConstraint("join_code", name=op.f("uq_classes_join_code")),
        sa.UniqueConstraint("teacher_code", name=op.f("uq_classes_teacher_code")),
    )
    op.create_table(
        "class_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("class_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_class_members")),
        sa.ForeignKeyConstraint(
            ["class_id"], ["classes.id"], name=op.f("fk_class_members_class_id_classes"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_class_members_user_id_users"), ondelete="CASCADE"
        ),
        sa.UniqueConstraint("class_id", "user_id", name=op.f("uq_class_members_class_id")),
    )
    op.create_index(op.f("ix_class_members_class_id"), "class_members", ["class_id"])
    op.create_index(op.f("ix_class_members_user_id"), "class_members", ["user_id"])


def downgrade() -> None:
    op.drop_table("class_members")
    op.drop_table("classes")
