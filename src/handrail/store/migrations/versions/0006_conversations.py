"""Conversations: a chat's turns kept across runs, one row per turn.

Adds `conversations` (who owns one, how many turns it holds, the run that holds it)
and `conversation_turns` (one row per turn, keyed by conversation and number), so an
append writes only the new turns and two appends at one count cannot both win.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
    )
    # Listings read a tenant's most recently updated conversations.
    op.create_index("ix_conversations_tenant_updated", "conversations", ["tenant_id", "updated_at"])
    op.create_table(
        "conversation_turns",
        sa.Column("conversation_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("conversation_turns")
    op.drop_table("conversations")
