"""Table definitions shared by the SQL stores; migrations create exactly these."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

audit_trails = sa.Table(
    "audit_trails",
    metadata,
    # A row holds the events of one call (or one event on its own); see `_audit_rows`.
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("event_id", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("earliest_us", sa.BigInteger(), nullable=False),
    sa.Column("latest_us", sa.BigInteger(), nullable=False),
    sa.Column("decisions", sa.Text(), nullable=False),
    sa.Column("codes", sa.Text()),
    sa.Column("events", sa.Text(), nullable=False),
    sa.Column("request_id", sa.String(128)),
    sa.Column("tool_call_id", sa.String(256)),
    sa.Column("tool", sa.String(128)),
    sa.Column("schema_version", sa.String(64)),
    sa.Column("args_hash", sa.String(64)),
    sa.Column("args_summary", sa.Text()),
    sa.Column("user_id", sa.String(256)),
    sa.Column("tenant_id", sa.String(256)),
    sa.Index("ix_audit_trails_tenant_seq", "tenant_id", "seq"),
    sa.Index("ix_audit_trails_tool_call_id", "tool_call_id"),
)

_TIME = sa.DateTime(timezone=True)

plans = sa.Table(
    "plans",
    metadata,
    sa.Column("plan_id", sa.String(64), primary_key=True),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("schema_version", sa.String(64), nullable=False),
    sa.Column("arguments", sa.Text(), nullable=False),
    sa.Column("expected_version", sa.String(256)),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("risk", sa.Integer(), nullable=False),
    sa.Column("confirmation", sa.String(16), nullable=False),
    sa.Column("required_approvals", sa.Integer(), nullable=False),
    sa.Column("impact", sa.Text(), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("expires_at", _TIME, nullable=False),
    sa.Column("revises", sa.String(64)),
    sa.Column("approver_permission", sa.String(256)),
    sa.Column("plan_hash", sa.String(64), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Index("ix_plans_tenant_created", "tenant_id", "created_at"),
)

plan_nonces = sa.Table(
    "plan_nonces",
    metadata,
    sa.Column("nonce", sa.String(64), primary_key=True),
    sa.Column("plan_id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("used_at", _TIME, nullable=False),
)

plan_approvals = sa.Table(
    "plan_approvals",
    metadata,
    sa.Column("plan_id", sa.String(64), primary_key=True),
    sa.Column("user_id", sa.String(256), primary_key=True),
    sa.Column("approved_at", _TIME, nullable=False),
)

executions = sa.Table(
    "executions",
    metadata,
    sa.Column("idempotency_key", sa.String(80), primary_key=True),
    sa.Column("plan_id", sa.String(64)),
    sa.Column("plan_hash", sa.String(64), nullable=False),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("principal", sa.Text(), nullable=False),
    sa.Column("arguments", sa.Text(), nullable=False),
    sa.Column("expected_version", sa.String(256)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("business_id", sa.String(256)),
    sa.Column("result", sa.Text()),
    sa.Column("error_code", sa.String(64)),
    sa.Column("lease_owner", sa.String(128)),
    sa.Column("lease_expires_at", _TIME),
    sa.Column("next_check_at", _TIME),
    sa.Column("checks", sa.Integer(), nullable=False),
    sa.Column("escalated", sa.Boolean(), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Column("retain_until", _TIME),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("purged_at", _TIME),
    sa.Index("ix_executions_status_check", "status", "next_check_at"),
    sa.Index("ix_executions_status_lease", "status", "lease_expires_at"),
    sa.Index("ix_executions_retain", "retain_until"),
    sa.Index("ix_executions_plan", "plan_id"),
)

raw_results = sa.Table(
    "raw_results",
    metadata,
    sa.Column("ref", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("call_id", sa.String(256), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("expires_at", _TIME, nullable=False),
    sa.Column("media_type", sa.String(128), nullable=False),
    sa.Column("size", sa.BigInteger(), nullable=False),
    sa.Column("complete", sa.Boolean(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Index("ix_raw_results_expires", "expires_at"),
    sa.Index("ix_raw_results_tenant_created", "tenant_id", "created_at"),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Column("data", sa.Text(), nullable=False),
    # Added by 0013 (the workers part): who drives a RUNNING run, and until when.
    sa.Column("lease_owner", sa.String(256)),
    sa.Column("lease_until", _TIME),
    sa.Index("ix_runs_tenant_updated", "tenant_id", "updated_at"),
    sa.Index("ix_runs_state_lease", "state", "lease_until"),
)

run_entries = sa.Table(
    "run_entries",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("n", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("data", sa.Text(), nullable=False),
)

conversations = sa.Table(
    "conversations",
    metadata,
    sa.Column("conversation_id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("turns", sa.Integer(), nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
    sa.Index("ix_conversations_tenant_updated", "tenant_id", "updated_at"),
)

conversation_turns = sa.Table(
    "conversation_turns",
    metadata,
    sa.Column("conversation_id", sa.String(64), primary_key=True),
    sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("data", sa.Text(), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
)

mcp_pins = sa.Table(
    "mcp_pins",
    metadata,
    sa.Column("upstream", sa.String(64), primary_key=True),
    sa.Column("tool", sa.String(128), primary_key=True),
    sa.Column("definition_hash", sa.String(64), nullable=False),
    sa.Column("definition", sa.Text(), nullable=False),
    sa.Column("approved_by", sa.String(256), nullable=False),
    sa.Column("approved_at", _TIME, nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("key_id", sa.String(32), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("label", sa.String(256), nullable=False),
    sa.Column("authority", sa.Text(), nullable=False),
    sa.Column("secret_hash", sa.String(64), nullable=False),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("expires_at", _TIME),
    sa.Column("revoked_at", _TIME),
    sa.Index("ix_api_keys_tenant_created", "tenant_id", "created_at"),
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("task_id", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=False),
    sa.Column("tool", sa.String(256), nullable=False),
    sa.Column("intent_key", sa.String(256), nullable=False),
    sa.Column("principal", sa.Text(), nullable=False),
    sa.Column("arguments", sa.Text(), nullable=False),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("max_attempts", sa.Integer(), nullable=False),
    sa.Column("progress", sa.Float(), nullable=False),
    sa.Column("progress_message", sa.String(200)),
    sa.Column("lease_holder", sa.String(256)),
    sa.Column("heartbeat_at", _TIME),
    sa.Column("cancel_requested", sa.Boolean(), nullable=False),
    sa.Column("error_code", sa.String(64)),
    sa.Column("error_message", sa.Text()),
    sa.Column("result", sa.Text()),
    sa.Column("result_ref", sa.String(128)),
    sa.Column("estimate_seconds", sa.Float()),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("started_at", _TIME),
    sa.Column("finished_at", _TIME),
    sa.Column("retry_at", _TIME),
    sa.Column("expires_at", _TIME, nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("generation", sa.Integer(), nullable=False, server_default="0"),
    sa.Index("ix_tasks_tenant_created", "tenant_id", "created_at"),
    sa.Index("ix_tasks_intent_generation", "intent_key", "generation"),
)
