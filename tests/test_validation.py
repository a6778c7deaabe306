from __future__ import annotations

import json

import pytest

from handrail.checks.syntax import ArgumentLimits, parse_arguments
from handrail.errors import ConfigurationError, ErrorCode, Refusal

LIMITS = ArgumentLimits(max_bytes=64, max_depth=3, max_items=6)


@pytest.mark.parametrize("raw", [None, "", "   ", b"", {}])
def test_no_arguments_mean_an_empty_object(raw: object) -> None:
    assert parse_arguments(raw, LIMITS) == {}


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1}', b'{"a": 1}', bytearray(b'{"a": 1}'), memoryview(b'{"a": 1}'), {"a": 1}],
)
def test_text_bytes_and_objects_decode_to_the_same_value(raw: object) -> None:
    assert parse_arguments(raw, LIMITS) == {"a": 1}


@pytest.mark.parametrize(
    "raw",
    [
        "x" * 65,
        json.dumps({"a": "é" * 30}),
        {"a": "x" * 70},
        '{"a": [[[1]]]}',
        {"a": [[[1]]]},
        '{"a": [1, 2, 3, 4, 5, 6]}',
        {"a": [1, 2, 3, 4, 5, 6]},
        3,
    ],
)
def test_configured_limits_on_size_depth_and_count_are_enforced(raw: object) -> None:
    with pytest.raises(Refusal) as caught:
        parse_arguments(raw, LIMITS)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert caught.value.stage == "syntax"
    assert caught.value.retryable is True


def test_the_default_limits_are_safe_and_positive() -> None:
    limits = ArgumentLimits()
    assert limits.max_bytes == 1 << 20
    assert 0 < limits.max_depth <= 64
    assert 0 < limits.max_items <= 100_000


@pytest.mark.parametrize("field", ["max_bytes", "max_depth", "max_items"])
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigurationError):
        ArgumentLimits(**{field: 0})
