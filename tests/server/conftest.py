"""The service's test fixtures (helpers in `_service`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _resources import any_services  # noqa: F401 - the fixture over SQLite and PostgreSQL
from _service import build_services

from _edge_traces import rec, traced  # noqa: F401 - spans in memory, a traced app
from handrail.server.services import Services
from handrail.store import open_store


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """Services over a fresh SQLite store in tmp_path."""
    store = open_store(tmp_path / "handrail.db")
    built = build_services(store, tmp_path)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()
