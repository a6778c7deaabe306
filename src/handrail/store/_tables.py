"""Table definitions shared by the SQL stores; migrations create exactly these."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

audit_events = sa.Table(
    "audit_events",
    metadata,
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
    sa.Index("ix_audit_events_tenant_seq", "tenant_id", "seq"),
    sa.Index("ix_audit_events_tool_call_id", "tool_call_id"),
)
