"""The application `examples/service/handrail.toml` serves: the payments example.

`build()` is the config's registry factory: the payments tools and policy over their
sample database, created with its two tenants the first time (the file lives next to
the service's store, under `.handrail/` of the current directory, or where
`HANDRAIL_PAYMENTS_DB` says).
"""

from __future__ import annotations

import os
from pathlib import Path

from examples.payments import PaymentsApp, build_app

__all__ = ["DATABASE_ENV", "build"]

DATABASE_ENV = "HANDRAIL_PAYMENTS_DB"
_DEFAULT = Path(".handrail") / "service-payments.db"


def build() -> PaymentsApp:
    """The payments app over its sample database (loaded on first use)."""
    database = Path(os.environ.get(DATABASE_ENV) or _DEFAULT)
    app = build_app(database=database)
    if not database.exists():
        app.database.reset()
    return app
