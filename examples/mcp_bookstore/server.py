"""The `--app` factory `handrail mcp serve` loads to serve the bookstore over MCP.

    handrail mcp serve --app examples.mcp_bookstore.server:build_app \
        --store sqlite:///.handrail/mcp-bookstore.db --tenant acme --user alice \
        --permission inventory.read --permission orders.read

The bookstore's database is the file named by BOOKSTORE_DB (default
.handrail/bookstore.db); a missing one is created with the two sample tenants. Who
calls is the server's configuration (`--tenant`, `--user`, `--permission`), never a
client's arguments: every query is scoped to that tenant.
"""

from __future__ import annotations

import os
from pathlib import Path

from examples.bookstore import BookstoreApp
from examples.bookstore import build_app as build_bookstore

__all__ = ["DATABASE_ENV", "build_app"]

DATABASE_ENV = "BOOKSTORE_DB"
"""The environment variable naming the bookstore's SQLite file."""

_DEFAULT = Path(".handrail") / "bookstore.db"


def build_app() -> BookstoreApp:
    """The bookstore over $BOOKSTORE_DB, with the sample tenants loaded into a new file."""
    path = Path(os.environ.get(DATABASE_ENV) or _DEFAULT)
    app = build_bookstore(database=path)
    if not path.exists():
        app.database.reset()
    return app
