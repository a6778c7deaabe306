from __future__ import annotations

import json
import math

import pytest

from handrail.canonical import canonical_json
from handrail.checks.syntax import ArgumentLimits, inexact_in_a_plan, parse_arguments
from handrail.errors import ConfigurationError, ErrorCode, Refusal

LIMITS = ArgumentLimits(max_bytes=64, max_depth=3, max_items=6)


@pytest.mark.parametrize("raw", [None, "", "   ", b"", {}])
def test_no_arguments_mean_an_empty_object(raw: object) -> None:
    assert parse_arguments(raw, LIMITS, write=False) == {}


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1}', b'{"a": 1}', bytearray(b'{"a": 1}'), memoryview(b'{"a": 1}'), {"a": 1}],
)
def test_text_bytes_and_objects_decode_to_the_same_value(raw: object) -> None:
    assert parse_arguments(raw, LIMITS, write=False) == {"a": 1}


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
        parse_arguments(raw, LIMITS, write=False)
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


# --- whole-number floats a write's plan cannot keep (issue 14, design question 2) ---------

ROOMY = ArgumentLimits()
BELOW_1E21 = math.nextafter(1e21, 0)


def _plan_round_trip_fails(number: float) -> bool:
    """What a plan does with a number: canonical JSON, read back, canonical JSON again."""
    encoded = canonical_json({"n": number})
    try:
        return canonical_json(json.loads(encoded)) != encoded
    except ValueError:
        return True


@pytest.mark.parametrize(
    ("number", "inexact"),
    [
        (float(2**53 - 1), False),
        (-float(2**53 - 1), False),
        (2.0**53, True),
        (-(2.0**53), True),
        (1e16, True),
        (9007199254740993.0, True),
        (BELOW_1E21, True),
        (-BELOW_1E21, True),
        (1e21, False),
        (-1e21, False),
        (1.5e300, False),
        (4503599627370495.5, False),
        (0.1, False),
        (-0.0, False),
    ],
)
def test_a_float_is_inexact_in_a_plan_exactly_when_the_plans_round_trip_breaks(
    number: float,
    inexact: bool,
) -> None:
    assert inexact_in_a_plan(number) is inexact
    assert _plan_round_trip_fails(number) is inexact


def test_a_float_of_2_53_or_more_reads_back_from_canonical_json_as_an_unsafe_int() -> None:
    # 9007199254740993 is not a double: the decoder already made it ...992.0.
    assert json.loads('{"n": 9007199254740993.0}')["n"] == 2.0**53
    stored = json.loads(canonical_json({"n": 1e16}))["n"]
    assert type(stored) is int
    assert stored == 10**16


@pytest.mark.parametrize(
    ("raw", "paths"),
    [
        ('{"a": 1e16}', ["$.a"]),
        ('{"a": 1E+16}', ["$.a"]),
        ('{"a": -9.007199254740992e15}', ["$.a"]),
        ('{"a": 9007199254740993.0}', ["$.a"]),
        ('{"a": 123456789012345678901.0}', ["$.a"]),
        ('{"a": {"b": [1, 2.5, 1e20]}}', ["$.a.b[2]"]),
        ('{"a b": [[1e16]], "c": 1e17, "d": 1e21}', ["$.c", '$["a b"][0][0]']),
        ({"a": {"b": [1, 2.0**53]}}, ["$.a.b[1]"]),
        ({"a": (-(2.0**60),)}, ["$.a[0]"]),
    ],
)
def test_a_write_refuses_each_float_a_plan_cannot_keep_by_its_path(
    raw: object,
    paths: list[str],
) -> None:
    with pytest.raises(Refusal) as caught:
        parse_arguments(raw, ROOMY, write=True)
    refusal = caught.value
    assert refusal.code is ErrorCode.INVALID_ARGUMENTS
    assert refusal.stage == "syntax"
    assert refusal.retryable is True
    assert list(refusal.field_errors) == paths
    assert parse_arguments(raw, ROOMY, write=False) == parse_arguments(raw, ROOMY, write=False)


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": 9007199254740991.0, "b": -9007199254740991.0}',
        '{"a": 1e21, "b": -1e21, "c": 1.5e300, "d": 1e-300}',
        '{"a": 0.1, "b": 4503599627370495.5, "c": 1e15, "d": -0.0}',
        '{"a": 9007199254740991, "b": -9007199254740991, "c": 10}',
        '{"a": "1e16", "b": "9007199254740993"}',
        {"a": [float(2**53 - 1), 1e21, 2.5], "b": 2**53 - 1},
    ],
)
def test_a_write_accepts_every_number_that_survives_its_plan(raw: object) -> None:
    parsed = parse_arguments(raw, ROOMY, write=True)
    assert parsed == parse_arguments(raw, ROOMY, write=False)
    encoded = canonical_json(parsed)
    assert canonical_json(json.loads(encoded)) == encoded


def test_an_integer_beyond_the_safe_range_is_refused_as_before_in_reads_and_writes() -> None:
    for write in (False, True):
        with pytest.raises(Refusal) as caught:
            parse_arguments('{"a": 9007199254740992}', ROOMY, write=write)
        assert caught.value.field_errors.keys() == {"$"}


def test_a_read_gets_a_float_beyond_2_53_as_decoded() -> None:
    parsed = parse_arguments('{"a": 1e16, "b": [9007199254740993.0]}', ROOMY, write=False)
    assert parsed == {"a": 1e16, "b": [2.0**53]}
    assert type(parsed["a"]) is float


def test_a_write_names_at_most_twenty_fields_sorted() -> None:
    raw = {f"k{i:02d}": 1e16 for i in range(25)}
    with pytest.raises(Refusal) as caught:
        parse_arguments(raw, ROOMY, write=True)
    assert list(caught.value.field_errors) == [f"$.k{i:02d}" for i in range(20)]
