"""Audit events: one row per stage transition and per registry change.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("event_id", sa.String(64), nullable=False, unique=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("code", sa.String(64)),
        sa.Column("request_id", sa.String(128)),
        sa.Column("tool_call_id", sa.String(256)),
        sa.Column("tool", sa.String(128)),
        sa.Column("schema_version", sa.String(64)),
        sa.Column("args_hash", sa.String(64)),
        sa.Column("args_summary", sa.Text()),
        sa.Column("user_id", sa.String(256)),
        sa.Column("tenant_id", sa.String(256)),
        sa.Column("duration_ms", sa.Float()),
        sa.Column("detail", sa.Text()),
    )
    op.create_index("ix_audit_events_tenant_seq", "audit_events", ["tenant_id", "seq"])
    op.create_index("ix_audit_events_tool_call_id", "audit_events", ["tool_call_id"])


def downgrade() -> None:
    op.drop_table("audit_events")
