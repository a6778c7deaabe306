"""Property: integral floats come back as int exactly where the schema says integer.

Random schemas nest objects, arrays (`items` and `prefixItems`), `anyOf`/`oneOf`
unions and `$ref`s into `$defs`, with integers, numbers and strings at the leaves, and
a valid value of each. Sending every integer as a float must deliver the original
value with the same Python types: ints at integer places, floats (whole ones too) at
number places. Adding a fraction to any integer must be refused, never rounded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.declare.schema import compile_validator

SAFE = 2**53 - 1


class Case(NamedTuple):
    schema: dict[str, Any]
    value: Any
    defs: dict[str, dict[str, Any]]


def _name(schema: dict[str, Any]) -> str:
    return "d" + hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:10]


def _merged(cases: list[Case]) -> dict[str, dict[str, Any]]:
    defs: dict[str, dict[str, Any]] = {}
    for case in cases:
        defs.update(case.defs)
    return defs


LEAVES = st.one_of(
    st.integers(-SAFE, SAFE).map(lambda n: Case({"type": "integer"}, n, {})),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: Case({"type": "number"}, x, {})),
    st.text(max_size=4).map(lambda s: Case({"type": "string"}, s, {})),
    st.lists(st.integers(-SAFE, SAFE), max_size=3).map(
        lambda ns: Case({"type": "array", "items": {"type": "integer"}}, ns, {}),
    ),
)
KEYS = st.text(alphabet="abcdefgh", min_size=1, max_size=4)


def _object(members: dict[str, Case]) -> Case:
    return Case(
        {"type": "object", "properties": {key: case.schema for key, case in members.items()}},
        {key: case.value for key, case in members.items()},
        _merged(list(members.values())),
    )


def _tuple(items: list[Case]) -> Case:
    return Case(
        {"type": "array", "prefixItems": [case.schema for case in items]},
        [case.value for case in items],
        _merged(items),
    )


def _repeated(case: Case, times: int) -> Case:
    return Case({"type": "array", "items": case.schema}, [case.value] * times, case.defs)


def _union(case: Case, keyword: str) -> Case:
    other = {"type": "boolean"} if keyword == "anyOf" else {"type": "null"}
    return Case({keyword: [other, case.schema]}, case.value, case.defs)


def _ref(case: Case) -> Case:
    name = _name(case.schema)
    return Case({"$ref": f"#/$defs/{name}"}, case.value, {**case.defs, name: case.schema})


def _extend(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    return st.one_of(
        st.dictionaries(KEYS, children, min_size=1, max_size=3).map(_object),
        st.lists(children, min_size=1, max_size=3).map(_tuple),
        st.tuples(children, st.integers(1, 3)).map(lambda pair: _repeated(*pair)),
        st.tuples(children, st.sampled_from(["anyOf", "oneOf"])).map(lambda pair: _union(*pair)),
        children.map(_ref),
    )


ROOTS = st.dictionaries(KEYS, st.recursive(LEAVES, _extend, max_leaves=12), max_size=4).map(
    _object,
)


def _root_schema(case: Case) -> dict[str, Any]:
    return {**case.schema, "$defs": case.defs} if case.defs else case.schema


def _floated(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [_floated(item) for item in value]
    if isinstance(value, dict):
        return {key: _floated(item) for key, item in value.items()}
    return value


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (type(value).__name__, value)
    return value


def _integers_in(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [path]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _integers_in(item, (*path, index))]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _integers_in(item, (*path, key))]
    return []


def _with_fraction(value: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return value + 0.5
    head, *rest = path
    if isinstance(value, list):
        return [
            _with_fraction(item, tuple(rest)) if i == head else item for i, item in enumerate(value)
        ]
    return {
        key: _with_fraction(item, tuple(rest)) if key == head else item
        for key, item in value.items()
    }


@settings(max_examples=300)
@given(ROOTS)
def test_integral_floats_come_back_as_int_exactly_where_the_schema_says_integer(case: Case) -> None:
    validator = compile_validator(_root_schema(case))
    assert validator.errors(case.value) == {}
    errors, checked = validator.check(_floated(case.value))
    assert errors == {}
    assert _typed(checked) == _typed(case.value)


@settings(max_examples=300)
@given(ROOTS)
def test_values_with_ints_already_in_place_pass_unchanged(case: Case) -> None:
    validator = compile_validator(_root_schema(case))
    errors, checked = validator.check(case.value)
    assert errors == {}
    assert _typed(checked) == _typed(case.value)


@settings(max_examples=300)
@given(ROOTS, st.data())
def test_an_integer_with_a_fraction_is_refused_never_rounded(
    case: Case, data: st.DataObject
) -> None:
    places = [path for path in _integers_in(case.value) if abs(_get(case.value, path)) < 2**50]
    if not places:
        return
    place = data.draw(st.sampled_from(places))
    validator = compile_validator(_root_schema(case))
    errors, _ = validator.check(_with_fraction(_floated(case.value), place))
    assert errors


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value
