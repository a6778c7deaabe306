"""Debian's /usr/bin/chromium driven by Playwright, for the tests that need a real browser.

Without chromium (or Playwright) those tests skip, except under CI=true, where a
missing chromium fails them: CI must install it (`make system-packages`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CHROMIUM", "launched_chromium", "require_chromium"]

CHROMIUM = Path("/usr/bin/chromium")


def require_chromium() -> None:
    """Skip (fail under CI=true) when chromium is missing; usable at module level."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; CI must install it (make system-packages)")
        pytest.skip(f"no {CHROMIUM} (make system-packages installs it)", allow_module_level=True)


@contextmanager
def launched_chromium() -> Iterator[Any]:
    """Headless chromium, closed when the block ends (Playwright's Browser)."""
    require_chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    # As root (containers), chromium refuses to start inside its own sandbox.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            yield launched
        finally:
            launched.close()
