"""People and console sessions: who may log in to the console, and their sessions.

Adds `console_people` (keyed by login; one login per tenant's user): the tenant, user
and authority they act with, the argon2 password hash, when disabled, the failed login
count and lock, times and a version moved by compare-and-set; and `console_sessions`
(keyed by the SHA-256 of the cookie's secret): whose, when made, last used, when it
ends, when revoked.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_people",
        sa.Column("login", sa.String(256), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("display_name", sa.String(256), nullable=False),
        sa.Column("password_hash", sa.String(512), nullable=False),
        sa.Column("disabled_at", _TIME),
        sa.Column("failed_logins", sa.Integer(), nullable=False),
        sa.Column("locked_until", _TIME),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.UniqueConstraint("tenant_id", "user_id", name="uq_console_people_tenant_user"),
    )
    op.create_table(
        "console_sessions",
        sa.Column("session_hash", sa.String(64), primary_key=True),
        sa.Column("login", sa.String(256), nullable=False),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("last_seen_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.Column("revoked_at", _TIME),
    )
    op.create_index("ix_console_sessions_login", "console_sessions", ["login"])
    op.create_index("ix_console_sessions_expires", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("console_sessions")
    op.drop_table("console_people")
