"""Skip a test for a missing part of the host, or fail it under CI=true, where it must exist."""

from __future__ import annotations

import os

import pytest

__all__ = ["missing", "needs"]


def missing(reason: str) -> None:
    """Skip with `reason`; under CI=true fail instead: CI machines have what tests need."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must have it")
    pytest.skip(reason)


def needs(program: str | None, name: str) -> str:
    """`program` (a path found on this host), else skip (or fail under CI) naming `name`."""
    if program is None:
        missing(f"{name} is not installed")
        raise AssertionError  # pragma: no cover - missing() never returns
    return program
