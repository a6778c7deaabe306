"""Idempotency-Key records of the HTTP API: the answer kept for each key a caller sent.

Adds `idempotency_keys`, keyed by (tenant, user, key): the fingerprint of the request
the key was first used for, the claim of the request holding it, its state (RUNNING,
DONE), the kept answer (status, content type, body), when it was made and when it
expires, and an index on the expiry for purges.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(256), primary_key=True),
        sa.Column("user_id", sa.String(256), primary_key=True),
        sa.Column("idempotency_key", sa.String(255), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("claim", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("status", sa.Integer()),
        sa.Column("content_type", sa.String(256)),
        sa.Column("body", sa.LargeBinary()),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
    )
    # Purges drop the oldest expired rows first.
    op.create_index("ix_idempotency_keys_expires", "idempotency_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_table("idempotency_keys")
