"""Whole-number floats reach tools as int wherever the schema says integer (issue 13, item 2).

JSON Schema counts 10.0 as an integer, so the gate accepts it; the tool then gets the
int 10 at every place the schema types as integer (nested objects, arrays, `$defs`,
unions), floats stay floats where the schema says number, and nothing is ever rounded.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from handrail import ErrorCode, Gate, Principal, Registry, RiskLevel, Tool, ToolCall, tool
from handrail.declare.schema import compile_validator

pytestmark = pytest.mark.anyio

WHO = Principal(user_id="u", tenant_id="t")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "either": {"type": ["integer", "string"]},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}]},
        "page": {
            "type": "object",
            "properties": {"size": {"type": "integer"}, "weight": {"type": "number"}},
        },
        "ref": {"$ref": "#/$defs/Quantity"},
        "maybe": {"anyOf": [{"$ref": "#/$defs/Quantity"}, {"type": "null"}]},
        "shape": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "box"}, "sides": {"type": "integer"}},
                    "required": ["kind"],
                },
                {
                    "type": "object",
                    "properties": {"kind": {"const": "disc"}, "radius": {"type": "number"}},
                    "required": ["kind"],
                },
            ],
        },
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "levels": {"type": "object", "patternProperties": {"^l[0-9]$": {"type": "integer"}}},
        "tree": {"$ref": "#/$defs/Node"},
        "choice": {"enum": [1, 2, 3]},
    },
    "$defs": {
        "Quantity": {"type": "integer", "minimum": 0},
        "Node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
        },
    },
}

SENT: dict[str, Any] = {
    "count": 10.0,
    "ratio": 2.0,
    "either": 3.0,
    "ids": [1.0, 2, -3.0],
    "pair": [4.0, 5.0],
    "page": {"size": 20.0, "weight": 1.0},
    "ref": 7.0,
    "maybe": 8.0,
    "shape": {"kind": "box", "sides": 4.0},
    "counts": {"a": 1.0, "b": 2.0},
    "levels": {"l1": 3.0, "other": 4.0},
    "tree": {"value": 1.0, "children": [{"value": 2.0, "children": [{"value": 3.0}]}]},
    "choice": 2.0,
}
EXPECTED: dict[str, Any] = {
    "count": 10,
    "ratio": 2.0,
    "either": 3,
    "ids": [1, 2, -3],
    "pair": [4, 5.0],
    "page": {"size": 20, "weight": 1.0},
    "ref": 7,
    "maybe": 8,
    "shape": {"kind": "box", "sides": 4},
    "counts": {"a": 1, "b": 2},
    "levels": {"l1": 3, "other": 4.0},
    "tree": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]},
    "choice": 2,
}


def _typed(value: object) -> object:
    """The value with each number tagged by its Python type, so 10 != 10.0 here."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (type(value).__name__, value)
    return value


def _raw_gate(schema: dict[str, Any], received: list[dict[str, Any]]) -> Gate:
    raw = Tool.from_json_schema(
        name="probe.numbers",
        description="Record the arguments.",
        input_schema=schema,
        fn=lambda arguments, _ctx: received.append(arguments),
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    registry = Registry()
    registry.register(raw)
    return Gate(registry)


async def test_a_raw_tool_receives_int_wherever_its_schema_says_integer() -> None:
    received: list[dict[str, Any]] = []
    gate = _raw_gate(SCHEMA, received)
    envelope = await gate.handle(ToolCall(id="c", name="probe.numbers", arguments=SENT), WHO)
    assert envelope.ok
    assert [_typed(arguments) for arguments in received] == [_typed(EXPECTED)]


async def test_json_text_with_whole_number_floats_is_delivered_as_int() -> None:
    received: list[dict[str, Any]] = []
    gate = _raw_gate(SCHEMA, received)
    text = '{"count": 1e1, "ids": [2.0, 3.00], "ratio": 5.0}'
    envelope = await gate.handle(ToolCall(id="c", name="probe.numbers", arguments=text), WHO)
    assert envelope.ok
    assert _typed(received) == _typed([{"count": 10, "ids": [2, 3], "ratio": 5.0}])


async def test_the_callers_own_arguments_object_is_left_unchanged() -> None:
    received: list[dict[str, Any]] = []
    gate = _raw_gate(SCHEMA, received)
    sent = {"ids": [1.0], "page": {"size": 2.0}}
    await gate.handle(ToolCall(id="c", name="probe.numbers", arguments=sent), WHO)
    assert _typed(sent) == _typed({"ids": [1.0], "page": {"size": 2.0}})
    assert _typed(received) == _typed([{"ids": [1], "page": {"size": 2}}])


@pytest.mark.parametrize(
    "arguments",
    [
        {"count": 10.5},
        {"ids": [1.0, 2.5]},
        {"page": {"size": 0.1}},
        {"tree": {"value": 1.0, "children": [{"value": 1.5}]}},
        {"count": 1e20},
        {"ids": [-1e300]},
    ],
    ids=[
        "fraction",
        "fraction-in-array",
        "fraction-nested",
        "fraction-recursive",
        "1e20",
        "-1e300",
    ],
)
async def test_a_number_that_is_not_an_exact_safe_integer_is_refused_never_rounded(
    arguments: dict[str, Any],
) -> None:
    received: list[dict[str, Any]] = []
    gate = _raw_gate(SCHEMA, received)
    envelope = await gate.handle(ToolCall(id="c", name="probe.numbers", arguments=arguments), WHO)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert received == []


def test_a_huge_whole_number_float_is_named_as_the_field_at_fault() -> None:
    validator = compile_validator(SCHEMA)
    errors, _ = validator.check({"page": {"size": 1e20}, "ratio": 1e20})
    assert list(errors) == ["$.page.size"]


def test_a_schema_without_integers_has_no_conversion_to_run() -> None:
    validator = compile_validator(
        {"type": "object", "properties": {"x": {"type": "number"}, "s": {"type": "string"}}},
    )
    assert not validator.converts_integers
    arguments = {"x": 1.0}
    errors, checked = validator.check(arguments)
    assert errors == {}
    assert checked is arguments


def test_arguments_without_floats_come_back_as_the_same_object() -> None:
    validator = compile_validator(SCHEMA)
    assert validator.converts_integers
    arguments = {"count": 1, "ids": [1, 2], "page": {"size": 3}}
    errors, checked = validator.check(arguments)
    assert errors == {}
    assert checked is arguments


# --- decorated tools ---------------------------------------------------------------------------


class _StrictPage(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    size: int
    weight: float = 0.0


async def test_a_decorated_tool_with_a_strict_model_gets_int_for_a_whole_number_float() -> None:
    received: list[object] = []

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe")
    def paged(
        page: _StrictPage,
        counts: dict[str, int],
        limit: Annotated[int, Field(ge=1)] = 5,
    ) -> None:
        """Record a page."""
        received.append((page.size, page.weight, counts, limit))

    registry = Registry()
    registry.register(paged)
    call = ToolCall(
        id="c",
        name="probe.paged",
        arguments={"page": {"size": 20.0, "weight": 2.0}, "counts": {"a": 3.0}, "limit": 4.0},
    )
    envelope = await Gate(registry).handle(call, WHO)
    assert envelope.ok
    assert _typed(received) == _typed([(20, 2.0, {"a": 3}, 4)])


# --- every way a schema can lead to an integer place --------------------------------------------


def _converted(schema: dict[str, Any], value: object) -> object:
    errors, checked = compile_validator({"type": "object", "properties": {"v": schema}}).check(
        {"v": value},
    )
    assert errors == {}
    return checked["v"]


@pytest.mark.parametrize(
    ("schema", "sent", "expected"),
    [
        (
            {"allOf": [{"type": "object", "properties": {"n": {"type": "integer"}}}]},
            {"n": 1.0, "x": 2.0},
            {"n": 1, "x": 2.0},
        ),
        (
            {
                "type": "object",
                "if": {"properties": {"kind": {"const": "count"}}},
                "then": {"properties": {"size": {"type": "integer"}}},
                "else": {"properties": {"size": {"type": "number"}}},
            },
            {"kind": "count", "size": 3.0},
            {"kind": "count", "size": 3},
        ),
        (
            {
                "type": "object",
                "if": {"properties": {"kind": {"const": "count"}}},
                "then": {"properties": {"size": {"type": "integer"}}},
            },
            {"kind": "weight", "size": 3.0},
            {"kind": "weight", "size": 3.0},
        ),
        (
            {
                "type": "object",
                "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
            },
            {"a": 1.5, "b": 2.0},
            {"a": 1.5, "b": 2},
        ),
        (
            {
                "type": "object",
                "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
            },
            {"b": 2.0},
            {"b": 2.0},
        ),
        (
            {"type": "array", "contains": {"type": "integer", "minimum": 10}},
            [1.5, 20.0, 3.0],
            [1.5, 20, 3.0],
        ),
        (
            {
                "type": "object",
                "properties": {"named": {"type": "number"}},
                "patternProperties": {"^p_": {"type": "number"}},
                "additionalProperties": {"type": "integer"},
            },
            {"named": 1.0, "p_x": 2.0, "other": 3.0},
            {"named": 1.0, "p_x": 2.0, "other": 3},
        ),
        (
            {"type": "object", "unevaluatedProperties": {"type": "integer"}},
            {"a": 1.0},
            {"a": 1},
        ),
        (
            {
                "type": "array",
                "prefixItems": [{"type": "number"}],
                "unevaluatedItems": {"type": "integer"},
            },
            [1.0, 2.0],
            [1.0, 2],
        ),
        ({"type": ["object", "string"], "properties": {"n": {"type": "integer"}}}, "text", "text"),
        ({"type": ["array", "string"], "items": {"type": "integer"}}, "text", "text"),
        ({"const": 5}, 5.0, 5),
        (
            {"type": ["integer", "object"], "properties": {"n": {"type": "integer"}}},
            {"n": 1.0},
            {"n": 1},
        ),
        ({"type": ["integer", "object"], "properties": {"n": {"type": "integer"}}}, 2.0, 2),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "if": {"required": ["a"]},
                "then": {"required": ["b"]},
            },
            {"n": 1.0},
            {"n": 1},
        ),
        ({"anyOf": [{"type": "string"}, {"$ref": "#/$defs/n"}]}, 4.0, 4),
        ({"$ref": "#count"}, 6.0, 6),
        ({"$ref": "https://example.com/tool.json#/$defs/n"}, 7.0, 7),
        ({"$ref": "nested.json"}, {"m": 8.0}, {"m": 8}),
        ({"$ref": "nested.json#/properties/m"}, 9.0, 9),
    ],
    ids=[
        "allOf",
        "if-then",
        "if-else",
        "dependent-present",
        "dependent-absent",
        "contains",
        "additional-only",
        "unevaluated-properties",
        "unevaluated-items",
        "object-or-string",
        "array-or-string",
        "const",
        "integer-or-object-given-object",
        "integer-or-object-given-integer",
        "conditional-without-integers",
        "anyOf-ref",
        "anchor",
        "absolute-ref-to-itself",
        "nested-id",
        "nested-id-pointer",
    ],
)
def test_every_applicator_leads_to_its_integer_places(
    schema: dict[str, Any],
    sent: object,
    expected: object,
) -> None:
    document = {
        "$id": "https://example.com/tool.json",
        "type": "object",
        "properties": {"v": schema},
        "$defs": {
            "n": {"type": "integer"},
            "count": {"$anchor": "count", "type": "integer"},
            "nested": {
                "$id": "nested.json",
                "type": "object",
                "properties": {"m": {"type": "integer"}},
            },
        },
    }
    errors, checked = compile_validator(document).check({"v": sent})
    assert errors == {}
    assert _typed(checked["v"]) == _typed(expected)


def test_a_dynamic_reference_is_followed_to_its_anchor() -> None:
    schema = {
        "$id": "https://example.com/tree.json",
        "$dynamicAnchor": "node",
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "kids": {"type": "array", "items": {"$dynamicRef": "#node"}},
        },
    }
    errors, checked = compile_validator(schema).check({"n": 1.0, "kids": [{"n": 2.0}]})
    assert errors == {}
    assert _typed(checked) == _typed({"n": 1, "kids": [{"n": 2}]})


def test_a_recursive_schema_without_integers_has_no_conversion() -> None:
    validator = compile_validator(
        {
            "type": "object",
            "properties": {
                "kids": {"type": "array", "items": {"$ref": "#"}},
                "x": {"type": "number"},
            },
        },
    )
    assert not validator.converts_integers


def test_a_huge_whole_number_float_in_an_array_is_named_by_its_index() -> None:
    errors, _ = compile_validator(SCHEMA).check({"ids": [1.0, 2.0, -1e300]})
    assert list(errors) == ["$.ids[2]"]


def test_dict_subclasses_and_tuples_given_as_decoded_arguments_are_converted_too() -> None:
    validator = compile_validator(SCHEMA)
    sent = {"page": OrderedDict({"size": 2.0}), "ids": (1.0, 2.0)}
    errors, checked = validator.check(sent)
    assert errors == {}
    assert _typed(checked) == _typed({"page": {"size": 2}, "ids": [1, 2]})
