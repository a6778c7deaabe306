"""API keys: bearer keys bound to a principal, kept as a hash of their secret.

Adds `api_keys` (the key id, whom it stands for: tenant, user and their authority as
JSON, a label, the secret's SHA-256, when it was made, expires and was revoked) and
an index for a tenant's newest keys. A key's secret is never stored.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("label", sa.String(256), nullable=False),
        sa.Column("authority", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME),
        sa.Column("revoked_at", _TIME),
    )
    # Listings read a tenant's newest keys.
    op.create_index("ix_api_keys_tenant_created", "api_keys", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_table("api_keys")
