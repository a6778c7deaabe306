"""Idempotency-Key records (the serve part; placeholder).

Revision ID: 0012
Revises: 0011
"""

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
