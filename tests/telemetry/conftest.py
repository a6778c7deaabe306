"""Fixtures of the telemetry tests: telemetry captured in memory (see _otel_capture)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _otel_capture import Captured, capture


@pytest.fixture
def captured() -> Iterator[Captured]:
    """A Telemetry recording into memory; its providers shut down after the test."""
    found = capture()
    yield found
    found.shutdown()
