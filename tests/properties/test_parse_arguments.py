"""Stage 1 round-trips every JSON object within limits and refuses everything past them.

Depth counts containers, the arguments object itself being level 1: `{"a": [1]}` has
depth 2. A value is accepted exactly when its depth is within `max_depth` (the other
limits are kept out of reach here), and then as text, bytes or decoded object alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from _json_strategies import json_scalars, json_values
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from handrail.canonical import canonical_json
from handrail.checks.syntax import ArgumentLimits, inexact_in_a_plan, parse_arguments
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


def _refusal_code(
    raw: object,
    limits: ArgumentLimits,
    *,
    write: bool = False,
) -> ErrorCode | None:
    try:
        parse_arguments(raw, limits, write=write)
    except Refusal as refusal:
        return refusal.code
    return None


@settings(max_examples=150)
@given(obj=JSON_OBJECTS)
def test_a_json_object_within_limits_round_trips_in_every_form(obj: dict[str, object]) -> None:
    limits = ArgumentLimits(max_depth=max(_depth(obj), 1), **ROOMY)
    for raw in _forms(obj):
        assert parse_arguments(raw, limits, write=False) == obj


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
    assert parse_arguments(at_limit, limits, write=False) == at_limit
    assert parse_arguments(json.dumps(at_limit), limits, write=False) == at_limit
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


# --- a write's numbers and the plan that keeps them (issue 14, design question 2) --------

_EDGES = [2.0**53, float(2**53 - 1), 1e16, 1e21, math.nextafter(1e21, 0), 1.5e300, 0.5]
PLAN_FLOATS = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=2.0**52, max_value=2e21)
    | st.sampled_from(_EDGES)
).flatmap(lambda f: st.sampled_from([f, -f]))
PLAN_SCALARS = json_scalars(st.integers(min_value=-SAFE, max_value=SAFE), text_size=8) | PLAN_FLOATS
PLAN_OBJECTS = st.dictionaries(
    st.text(max_size=6),
    json_values(PLAN_SCALARS, width=4, key_size=6, max_leaves=12),
    max_size=5,
)


def _plan_keeps(obj: dict[str, object]) -> bool:
    """Whether a plan's canonical JSON, read back, canonicalises to the same text."""
    stored = canonical_json(obj)
    try:
        return canonical_json(json.loads(stored)) == stored
    except ValueError:
        return False


@settings(max_examples=300)
@given(obj=PLAN_OBJECTS)
@example(obj={"a": [{"b": 1e16}]})
@example(obj={"a": -(2.0**53)})
@example(obj={"a": float(2**53 - 1), "b": 1e21})
def test_a_write_is_accepted_exactly_when_its_plan_keeps_every_number(
    obj: dict[str, object],
) -> None:
    limits = ArgumentLimits(max_depth=max(_depth(obj), 1), **ROOMY)
    keeps = _plan_keeps(obj)
    for raw in _forms(obj):
        assert parse_arguments(raw, limits, write=False) == obj
        if keeps:
            assert parse_arguments(raw, limits, write=True) == obj
        else:
            assert _refusal_code(raw, limits, write=True) is ErrorCode.INVALID_ARGUMENTS


FLOAT_SPELLINGS = st.one_of(
    PLAN_FLOATS.map(json.dumps),
    PLAN_FLOATS.map(lambda f: f"{f:.3e}"),
    PLAN_FLOATS.filter(lambda f: abs(f) < 1e30).map(lambda f: f"{f:.2f}"),
    st.builds(
        lambda sign, mantissa, point, exponent: f"{sign}{mantissa}{point}e{exponent}",
        st.sampled_from(["", "-"]),
        st.integers(min_value=0, max_value=10**18),
        st.sampled_from(["", ".0", ".5", ".000001"]),
        st.sampled_from(["", "+", "-"]).flatmap(
            lambda sign: st.integers(min_value=0, max_value=25).map(lambda n: f"{sign}{n}"),
        ),
    ),
)


@settings(max_examples=400)
@given(spelling=FLOAT_SPELLINGS, nest=st.booleans())
@example(spelling="9007199254740993.0", nest=False)
@example(spelling="90071992547409.92e2", nest=True)
@example(spelling="1E16", nest=False)
def test_however_a_float_is_spelled_a_write_refuses_it_exactly_when_a_plan_cannot_keep_it(
    spelling: str,
    nest: bool,
) -> None:
    text = f'{{"a": [{{"b": {spelling}}}]}}' if nest else f'{{"a": {spelling}}}'
    number = json.loads(spelling)
    assume(math.isfinite(number))  # "1.798e+308" rounds to infinity: refused for that
    expected = ErrorCode.INVALID_ARGUMENTS if inexact_in_a_plan(number) else None
    assert _refusal_code(text, ArgumentLimits(), write=True) is expected
    assert _refusal_code(text, ArgumentLimits()) is None


# --- the quick path of small flat objects -------------------------------------------------

FLAT_KEYS = st.sampled_from(["a", "b", "a:b", ":", "\\u003a", "\\u003a:", "k\\ud800"]) | st.text(
    max_size=4
).map(lambda key: json.dumps(key)[1:-1])
FLAT_VALUES = st.one_of(
    RISKY_SCALARS.map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.sampled_from(['"x:y"', '"\\u003a"', '"::"', "NaN", "-Infinity", "1e400", "true", "null"]),
    st.sampled_from(["2e16", "9007199254740993", "-9007199254740992", "1.5e300", "0.5"]),
)


@settings(max_examples=800)
@given(
    members=st.lists(st.tuples(FLAT_KEYS, FLAT_VALUES), max_size=5),
    limits=TEXT_LIMITS,
    write=st.booleans(),
    spacing=st.sampled_from([", ", ",", " , "]),
    cut=st.sampled_from([0, 0, 0, -1, -2, -5, 1, 3]),
)
@example(members=[("a", "1"), ("a", '"\\u003a"')], limits=_WIDE, write=False, spacing=",", cut=0)
@example(members=[("a", '":"'), ("a", "1")], limits=_WIDE, write=False, spacing=",", cut=0)
@example(members=[("a", "2e16")], limits=_WIDE, write=True, spacing=",", cut=0)
@example(members=[("a", "NaN"), ("b", "1")], limits=_WIDE, write=False, spacing=",", cut=-1)
@example(members=[("a", "1"), ("a", "2")], limits=_WIDE, write=False, spacing=",", cut=-1)
def test_the_quick_path_accepts_only_what_the_full_path_accepts_alike(
    members: list[tuple[str, str]],
    limits: ArgumentLimits,
    write: bool,
    spacing: str,
    cut: int,
) -> None:
    from handrail.checks import syntax  # noqa: PLC0415

    text = "{" + spacing.join(f'"{key}": {value}' for key, value in members) + "}"
    if cut:
        text = text[:cut]
    quick: object
    try:
        quick = syntax._quick(text, limits, write=write)
    except Refusal as refusal:
        quick = (refusal.code, refusal.summary, refusal.field_errors, refusal.detail)
    full: object
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(syntax, "_quick", lambda *_args, **_kwargs: None)
        try:
            full = parse_arguments(text, limits, write=write)
        except Refusal as refusal:
            full = (refusal.code, refusal.summary, refusal.field_errors, refusal.detail)
    if type(quick) is tuple:
        assert quick == full
    elif quick is not None:
        assert quick == full
        assert type(full) is dict
        assert list(quick) == list(full)
