"""Time as a dependency: wall-clock timestamps and a monotonic scale for deadlines.

Injected everywhere time matters so that tests are deterministic; no module calls
`time` or `datetime.now` directly.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FixedClock", "SystemClock"]


class Clock(Protocol):
    """Source of time for timestamps (`now`) and for deadlines (`monotonic`)."""

    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a scale that never goes backwards; only differences mean anything."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current time in UTC."""
        return datetime.now(UTC)

    # `time.monotonic` itself, so that reading it costs no Python frame (deadlines read
    # it several times per call).
    monotonic = staticmethod(time.monotonic)


class FixedClock:
    """A clock that moves only when told to; for tests and replays."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        """The fixed current time."""
        return self._now

    def monotonic(self) -> float:
        """The fixed monotonic reading."""
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both scales forward."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
