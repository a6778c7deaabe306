"""State shared by the workers of one service (the workers part; placeholder).

Revision ID: 0013
Revises: 0012
"""

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
