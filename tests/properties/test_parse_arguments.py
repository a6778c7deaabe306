"""Stage 1 round-trips every JSON object within limits and refuses everything past them.

Depth counts containers, the arguments object itself being level 1: `{"a": [1]}` has
depth 2. A value is accepted exactly when its depth is within `max_depth` (the other
limits are kept out of reach here), and then as text, bytes or decoded object alike.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from _json_strategies import json_scalars, json_values
from hypothesis import example, given, settings
from hypothesis import strategies as st

from handrail.checks.syntax import ArgumentLimits, parse_arguments
from handrail.errors import ErrorCode, Refusal

SAFE = 2**53 - 1
ROOMY = {"max_bytes": 1 << 22, "max_items": 100_000}

JSON_SCALARS = json_scalars(st.integers(min_value=-SAFE, max_value=SAFE), text_size=30)
JSON_VALUES = json_values(JSON_SCALARS, width=5, key_size=10, max_leaves=15)
JSON_OBJECTS = st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=6)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _forms(obj: dict[str, object]) -> list[object]:
    text = json.dumps(obj)
    return [
        text,
        json.dumps(obj, ensure_ascii=False),
        json.dumps(obj, indent=2),
        text.encode("utf-8"),
        json.dumps(obj, ensure_ascii=False).encode("utf-8"),
        obj,
    ]


def _refusal_code(raw: object, limits: ArgumentLimits) -> ErrorCode | None:
    try:
        parse_arguments(raw, limits)
    except Refusal as refusal:
        return refusal.code
    return None


@settings(max_examples=150)
@given(obj=JSON_OBJECTS)
def test_a_json_object_within_limits_round_trips_in_every_form(obj: dict[str, object]) -> None:
    limits = ArgumentLimits(max_depth=max(_depth(obj), 1), **ROOMY)
    for raw in _forms(obj):
        assert parse_arguments(raw, limits) == obj


@settings(max_examples=150)
@given(obj=JSON_OBJECTS, max_depth=st.integers(min_value=1, max_value=6))
def test_an_object_is_accepted_exactly_when_its_depth_is_within_the_limit(
    obj: dict[str, object],
    max_depth: int,
) -> None:
    limits = ArgumentLimits(max_depth=max_depth, **ROOMY)
    expected = None if _depth(obj) <= max_depth else ErrorCode.INVALID_ARGUMENTS
    for raw in _forms(obj):
        assert _refusal_code(raw, limits) is expected


def _nest(leaf: object, levels: int, *, as_list: bool) -> object:
    value = leaf
    for _ in range(levels):
        value = [value] if as_list else {"k": value}
    return value


@settings(max_examples=100)
@given(
    leaf=JSON_VALUES,
    max_depth=st.integers(min_value=1, max_value=40),
    extra=st.integers(min_value=1, max_value=200),
    as_list=st.booleans(),
)
def test_anything_deeper_than_the_limit_is_refused_as_invalid_arguments(
    leaf: object,
    max_depth: int,
    extra: int,
    as_list: bool,
) -> None:
    obj = {"deep": _nest(leaf, max_depth + extra, as_list=as_list)}
    assert _depth(obj) > max_depth
    limits = ArgumentLimits(max_depth=max_depth, **ROOMY)
    for raw in _forms(obj):  # type: ignore[arg-type]
        assert _refusal_code(raw, limits) is ErrorCode.INVALID_ARGUMENTS


@settings(max_examples=100)
@given(
    obj=JSON_OBJECTS,
    big=st.integers(min_value=SAFE + 1) | st.integers(max_value=-SAFE - 1),
    key=st.text(),
)
def test_an_integer_outside_the_safe_range_is_refused_wherever_it_is(
    obj: dict[str, object],
    big: int,
    key: str,
) -> None:
    obj = {**obj, key: [big]}
    limits = ArgumentLimits(max_depth=max(_depth(obj), 2), **ROOMY)
    for raw in _forms(obj):
        assert _refusal_code(raw, limits) is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize("max_depth", [1, 2, 32])
def test_the_depth_limit_is_inclusive(max_depth: int) -> None:
    limits = ArgumentLimits(max_depth=max_depth)
    at_limit = {"v": _nest(1, max_depth - 1, as_list=True)}
    assert parse_arguments(at_limit, limits) == at_limit
    assert parse_arguments(json.dumps(at_limit), limits) == at_limit
    over = {"v": _nest(1, max_depth, as_list=True)}
    assert _refusal_code(over, limits) is ErrorCode.INVALID_ARGUMENTS
    assert _refusal_code(json.dumps(over), limits) is ErrorCode.INVALID_ARGUMENTS


# --- the text pre-scan that can skip the walk ------------------------------------------------

RISKY_SCALARS = st.one_of(
    st.sampled_from(["\ud800", "a\udfffb", "{[,:", "1" * 20, "9e999"]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    JSON_SCALARS,
)
RISKY_VALUES = json_values(RISKY_SCALARS, key_size=6, max_leaves=25)
TEXT_LIMITS = st.builds(
    ArgumentLimits,
    max_bytes=st.just(1 << 22),
    max_depth=st.integers(min_value=1, max_value=16),
    max_items=st.integers(min_value=1, max_value=200),
)


_WIDE = ArgumentLimits(max_bytes=1 << 22, max_depth=16, max_items=200)


@settings(max_examples=600)
@given(
    obj=st.dictionaries(st.text(max_size=6), RISKY_VALUES, max_size=5),
    limits=TEXT_LIMITS,
    ascii_only=st.booleans(),
    overflow=st.sampled_from(["", "", "", "1e400", "-2e308", "123456789012345678"]),
)
@example(obj={"a": "\ud800"}, limits=_WIDE, ascii_only=True, overflow="")
@example(obj={"a": "x\udfff"}, limits=_WIDE, ascii_only=False, overflow="")
@example(obj={"a": [[[1]]]}, limits=replace(_WIDE, max_depth=3), ascii_only=True, overflow="")
@example(obj={"a": [1, 2, 3, 4]}, limits=replace(_WIDE, max_items=4), ascii_only=True, overflow="")
@example(obj={}, limits=_WIDE, ascii_only=True, overflow="1e400")
@example(obj={}, limits=_WIDE, ascii_only=True, overflow="123456789012345678")
def test_the_text_prescan_never_skips_a_walk_that_would_refuse(
    obj: dict[str, object],
    limits: ArgumentLimits,
    ascii_only: bool,
    overflow: str,
) -> None:
    from handrail.checks.syntax import _check_shape, _text_within_limits  # noqa: PLC0415

    text = json.dumps(obj, ensure_ascii=ascii_only)
    if overflow:
        text = text[:-1] + ("," if obj else "") + f'"n": {overflow}' + "}"
    value = json.loads(text)
    if _text_within_limits(text, limits):
        _check_shape(value, limits)  # must not raise
