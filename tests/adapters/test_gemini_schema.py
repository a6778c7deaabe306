"""JSON Schema to Gemini's OpenAPI-subset `parameters`: what is kept, rewritten or refused.

The property tests declare tools from generated signatures, as `@tool` users do, and
check that the result is a valid SDK `Schema` and that no unsupported keyword of the
original disappears without an issue naming it.
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import uuid
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

import pytest
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from handrail import RiskLevel, Tool, tool
from handrail.adapters._openapi import to_openapi
from handrail.adapters.base import IssueAction, SchemaIssue


def convert(
    properties: dict[str, Any], **root: Any
) -> tuple[dict[str, Any] | None, list[SchemaIssue]]:
    return to_openapi("t.x", {"type": "object", "properties": properties, **root})


def found(issues: list[SchemaIssue]) -> set[tuple[str, str, IssueAction]]:
    return {(i.path, i.keyword, i.action) for i in issues}


def valid_schema(schema: dict[str, Any]) -> None:
    parsed = types.Schema.model_validate(schema)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == schema


REWRITTEN = IssueAction.REWRITTEN
REFUSED = IssueAction.REFUSED


def test_types_are_upper_case_as_the_rest_enum_spells_them() -> None:
    schema, issues = convert(
        {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "a": {"type": "array", "items": {"type": "string"}},
            "o": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    )
    assert schema is not None
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "s": "STRING",
        "i": "INTEGER",
        "n": "NUMBER",
        "b": "BOOLEAN",
        "a": "ARRAY",
        "o": "OBJECT",
    }
    assert issues == []
    valid_schema(schema)


def test_supported_constraints_are_kept_verbatim() -> None:
    kept = {
        "type": "string",
        "title": "Code",
        "description": "A code",
        "default": "ABC",
        "pattern": "^[A-Z]+$",
        "minLength": 1,
        "maxLength": 8,
        "format": "date-time",
    }
    numbers = {"type": "integer", "minimum": 1, "maximum": 9, "format": "int64"}
    lists = {
        "type": "array",
        "items": {"type": "string", "enum": ["a"]},
        "minItems": 1,
        "maxItems": 2,
    }
    schema, issues = convert({"code": kept, "n": numbers, "l": lists}, required=["code"])
    assert schema is not None
    assert issues == []
    assert schema["properties"]["code"] == {**kept, "type": "STRING"}
    assert schema["properties"]["n"] == {**numbers, "type": "INTEGER"}
    assert schema["required"] == ["code"]
    valid_schema(schema)


def test_optional_becomes_nullable() -> None:
    schema, issues = convert(
        {"x": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}}
    )
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "STRING", "nullable": True, "default": None}
    assert found(issues) == {("$.properties.x", "anyOf", REWRITTEN)}


def test_a_type_list_with_null_becomes_nullable_and_several_types_are_refused() -> None:
    schema, issues = convert({"x": {"type": ["integer", "null"]}})
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "INTEGER", "nullable": True}
    assert found(issues) == {("$.properties.x", "type", REWRITTEN)}
    schema, issues = convert({"x": {"type": ["integer", "string"]}})
    assert schema is None
    assert ("$.properties.x", "type", REFUSED) in found(issues)


def test_references_are_inlined_with_their_sibling_keywords() -> None:
    schema, issues = convert(
        {"colour": {"$ref": "#/$defs/Colour", "default": "red"}},
        **{"$defs": {"Colour": {"type": "string", "enum": ["red", "blue"], "title": "Colour"}}},
    )
    assert schema is not None
    assert schema["properties"]["colour"] == {
        "type": "STRING",
        "title": "Colour",
        "default": "red",
        "enum": ["red", "blue"],
    }
    assert found(issues) == {
        ("$", "$defs", REWRITTEN),
        ("$.properties.colour", "$ref", REWRITTEN),
    }


@pytest.mark.parametrize(
    "ref",
    ["#/$defs/Node", "#", "#/$defs/Missing", "https://example.com/schema.json", "#anchor"],
)
def test_recursive_and_unresolvable_references_are_refused(ref: str) -> None:
    node = {"type": "object", "properties": {"next": {"$ref": ref}}}
    schema, issues = convert({"node": {"$ref": "#/$defs/Node"}}, **{"$defs": {"Node": node}})
    assert schema is None
    assert any(i.keyword == "$ref" and i.action is REFUSED for i in issues)


def test_a_reference_used_twice_is_inlined_twice_and_reported_once_per_place() -> None:
    address = {"type": "object", "properties": {"city": {"type": "string", "format": "x"}}}
    schema, issues = convert(
        {"home": {"$ref": "#/$defs/A"}, "work": {"$ref": "#/$defs/A"}},
        **{"$defs": {"A": address}},
    )
    assert schema is not None
    assert schema["properties"]["home"] == schema["properties"]["work"]
    formats = [i for i in issues if i.keyword == "format"]
    assert [i.path for i in formats] == ['$["$defs"].A.properties.city']


def test_integer_and_boolean_enums_are_described_instead() -> None:
    schema, issues = convert(
        {"level": {"type": "integer", "enum": [1, 2]}, "flag": {"type": "boolean", "const": True}},
    )
    assert schema is not None
    assert schema["properties"]["level"] == {"type": "INTEGER", "description": "One of: 1, 2."}
    assert schema["properties"]["flag"] == {"type": "BOOLEAN", "description": "One of: true."}
    assert found(issues) == {
        ("$.properties.level", "enum", REWRITTEN),
        ("$.properties.flag", "const", REWRITTEN),
        ("$.properties.flag", "enum", REWRITTEN),
    }


def test_a_string_const_becomes_a_one_value_enum_and_null_in_an_enum_becomes_nullable() -> None:
    schema, _ = convert({"k": {"const": "cat"}, "m": {"enum": ["a", None]}})
    assert schema is not None
    assert schema["properties"]["k"] == {"type": "STRING", "enum": ["cat"]}
    assert schema["properties"]["m"] == {"type": "STRING", "nullable": True, "enum": ["a"]}


@pytest.mark.parametrize(
    "bad",
    [{"enum": ["a", 1]}, {"enum": []}, {"type": "string", "enum": [1]}, {"enum": [{"a": 1}]}],
)
def test_enums_without_one_type_are_refused(bad: dict[str, Any]) -> None:
    schema, issues = convert({"x": bad})
    assert schema is None
    assert [i.keyword for i in issues if i.action is REFUSED] == ["enum"]


def test_exclusive_bounds_become_inclusive_and_are_noted() -> None:
    schema, issues = convert(
        {"r": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "exclusiveMaximum": 2}},
    )
    assert schema is not None
    assert schema["properties"]["r"] == {
        "type": "NUMBER",
        "minimum": 0,
        "maximum": 1,
        "description": "Greater than 0. Less than 2.",
    }
    assert {i.keyword for i in issues} == {"exclusiveMinimum", "exclusiveMaximum"}


def test_tuples_become_one_items_schema() -> None:
    same, _ = convert({"p": {"type": "array", "prefixItems": [{"type": "integer"}] * 2}})
    mixed, issues = convert(
        {"p": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}}
    )
    assert same is not None
    assert mixed is not None
    assert same["properties"]["p"]["items"] == {"type": "INTEGER"}
    assert mixed["properties"]["p"]["items"] == {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]}
    assert found(issues) == {("$.properties.p", "prefixItems", REWRITTEN)}
    valid_schema(mixed)


def test_one_of_becomes_any_of_and_the_discriminator_is_dropped() -> None:
    schema, issues = convert(
        {
            "pet": {
                "oneOf": [{"type": "string"}, {"type": "integer"}],
                "discriminator": {"propertyName": "kind"},
                "description": "A pet",
            },
        },
    )
    assert schema is not None
    assert schema["properties"]["pet"] == {
        "anyOf": [{"type": "STRING"}, {"type": "INTEGER"}],
        "description": "A pet",
    }
    assert {i.keyword for i in issues} == {"oneOf", "discriminator"}


def test_all_of_with_one_member_is_merged_and_with_several_refused() -> None:
    schema, issues = convert({"x": {"allOf": [{"type": "string"}], "description": "d"}})
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "STRING", "description": "d"}
    assert found(issues) == {("$.properties.x", "allOf", REWRITTEN)}
    schema, issues = convert({"x": {"allOf": [{"type": "string"}, {"minLength": 1}]}})
    assert schema is None
    assert found(issues) == {("$.properties.x", "allOf", REFUSED)}


@pytest.mark.parametrize(
    ("sub", "keyword"),
    [
        ({"type": "object"}, "properties"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "additionalProperties"),
        ({"type": "array"}, "items"),
        ({"type": "array", "items": {}}, "items"),
        ({}, "type"),
        ({"description": "anything at all"}, "type"),
        ({"type": "null"}, "type"),
        ({"anyOf": [{"type": "null"}]}, "anyOf"),
    ],
    ids=[
        "empty-object",
        "map",
        "array-no-items",
        "array-any",
        "any",
        "described-any",
        "null",
        "only-null",
    ],
)
def test_shapes_gemini_cannot_describe_are_refused(sub: dict[str, Any], keyword: str) -> None:
    schema, issues = convert({"x": sub})
    assert schema is None
    assert keyword in {i.keyword for i in issues if i.action is REFUSED}


@pytest.mark.parametrize("name", ["first-name", "$ref", "9lives", "a b"])
def test_parameter_names_gemini_refuses_are_refused(name: str) -> None:
    schema, issues = convert({name: {"type": "string"}})
    assert schema is None
    assert [i.keyword for i in issues if i.action is REFUSED] == ["properties"]


def test_a_root_that_is_not_an_object_is_refused() -> None:
    schema, issues = to_openapi("t.x", {"type": "array", "items": {"type": "string"}})
    assert schema is None
    assert found(issues) == {("$", "type", REFUSED)}


def test_unknown_and_misplaced_keywords_are_dropped_with_an_issue_each() -> None:
    schema, issues = convert(
        {
            "x": {"type": "string", "minimum": 3, "x-internal": True, "not": {"const": "a"}},
            "o": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a", "ghost"],
                "additionalProperties": False,
                "patternProperties": {"^b": {"type": "string"}},
            },
        },
    )
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "STRING"}
    assert schema["properties"]["o"]["required"] == ["a"]
    assert found(issues) == {
        ("$.properties.x", "minimum", REWRITTEN),
        ("$.properties.x", "x-internal", REWRITTEN),
        ("$.properties.x", "not", REWRITTEN),
        ("$.properties.o", "required", REWRITTEN),
        ("$.properties.o", "additionalProperties", REWRITTEN),
        ("$.properties.o", "patternProperties", REWRITTEN),
    }


def test_a_missing_type_is_inferred_from_properties_or_items() -> None:
    schema, issues = convert(
        {
            "o": {"properties": {"a": {"type": "string"}}},
            "a": {"items": {"type": "string"}},
        },
    )
    assert schema is not None
    assert schema["properties"]["o"]["type"] == "OBJECT"
    assert schema["properties"]["a"]["type"] == "ARRAY"
    assert {i.keyword for i in issues} == {"type"}


def test_examples_give_their_first_member_as_example() -> None:
    schema, issues = convert({"x": {"type": "string", "examples": ["a", "b"]}})
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "STRING", "example": "a"}
    assert {i.keyword for i in issues} == {"examples"}
    valid_schema(schema)


def test_a_schema_that_explodes_when_inlined_is_refused() -> None:
    defs = {
        f"L{i}": {"type": "array", "items": {"anyOf": [{"$ref": f"#/$defs/L{i + 1}"}] * 4}}
        for i in range(8)
    }
    defs["L8"] = {"type": "string"}
    schema, issues = convert({"x": {"$ref": "#/$defs/L0"}}, **{"$defs": defs})
    assert schema is None
    assert any(i.action is REFUSED for i in issues)


# --- property: representative @tool signatures -----------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    city: Annotated[str, Field(max_length=40, description="The city")]
    zip: str | None = None


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


LEAVES: list[Any] = [
    str,
    int,
    float,
    bool,
    Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[a-z]+$")],
    Annotated[int, Field(ge=0, le=100, description="A count")],
    Annotated[float, Field(gt=0, lt=1, multiple_of=0.25)],
    Literal["slow", "fast"],
    Literal["only"],
    Literal[1, 2, 3],
    Literal[True],
    Colour,
    Level,
    dt.date,
    dt.datetime,
    uuid.UUID,
    Address,
    Annotated[Cat | Dog, Field(discriminator="kind")],
    tuple[int, str],
    set[int],
]


def wrapped(leaf: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            leaf,
            leaf | None,
            list[leaf],
            Annotated[list[leaf], Field(min_length=1, max_length=4)],
        ],
    )


parameter_types = st.sampled_from(LEAVES).flatmap(wrapped)
# A prefix keeps generated names clear of Python keywords and identity names.
parameter_name = st.from_regex(r"\Aarg_[a-z0-9_]{0,10}\Z")


def declared(signature: dict[str, tuple[Any, bool]]) -> Tool:
    """A tool whose signature has these (annotation, optional) parameters, as `@tool` sees it."""

    def fn(**arguments: Any) -> None:
        """A generated tool."""

    parameters = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=annotation,
            default=None if optional else inspect.Parameter.empty,
        )
        for name, (annotation, optional) in signature.items()
    ]
    fn.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    fn.__annotations__ = {name: annotation for name, (annotation, _) in signature.items()}
    return tool(risk=RiskLevel.L0_PUBLIC_READ, name="gen.tool")(fn)


signatures = st.dictionaries(
    parameter_name,
    st.tuples(parameter_types, st.booleans()),
    min_size=1,
    max_size=5,
)

# What Gemini's Schema keeps verbatim; anything else must be named by an issue.
KEPT = {
    "type",
    "properties",
    "required",
    "items",
    "anyOf",
    "enum",
    "format",
    "title",
    "description",
    "default",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
}
# Keywords whose values are data or names, not schemas.
VALUE_KEYWORDS = {"default", "enum", "const", "examples", "example", "required", "discriminator"}


def keywords(schema: object) -> Iterator[str]:
    """Every keyword used anywhere in a JSON Schema, skipping property names and data."""
    if not isinstance(schema, Mapping):
        return
    for key, value in schema.items():
        yield key
        if key in VALUE_KEYWORDS:
            continue
        if key in {"properties", "$defs", "definitions"} and isinstance(value, Mapping):
            for sub in value.values():
                yield from keywords(sub)
        elif isinstance(value, list):
            for sub in value:
                yield from keywords(sub)
        else:
            yield from keywords(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signatures)
def test_declared_tools_convert_to_valid_schemas_and_every_change_is_reported(
    signature: dict[str, tuple[Any, bool]],
) -> None:
    spec = declared(signature).spec
    schema, issues = to_openapi(spec.name, spec.input_schema)
    assert [i for i in issues if i.action is REFUSED] == []
    assert schema is not None
    valid_schema(schema)
    assert set(schema["properties"]) == set(spec.input_schema["properties"])
    reported = {i.keyword for i in issues}
    unsupported = set(keywords(spec.input_schema)) - KEPT
    assert unsupported <= reported
    assert set(keywords(schema)) <= KEPT | {"nullable", "example"}


@settings(max_examples=50, deadline=None)
@given(signatures, st.sampled_from([dict[str, int], list[Any], dict[str, Any]]))
def test_declared_tools_with_free_form_maps_are_refused_never_sent_loose(
    signature: dict[str, tuple[Any, bool]],
    loose: Any,
) -> None:
    spec = declared({**signature, "zz_loose": (loose, True)}).spec
    schema, issues = to_openapi(spec.name, spec.input_schema)
    assert schema is None
    refused = [i.path for i in issues if i.action is REFUSED]
    assert refused
    assert all(path.startswith("$.properties.zz_loose") for path in refused)


@pytest.mark.parametrize(
    ("sub", "expected"),
    [
        ({"anyOf": [{"type": "string"}], "oneOf": [{"type": "string"}]}, {("oneOf", REFUSED)}),
        ({"type": "string", "const": "a", "enum": ["a"]}, {("const", REFUSED)}),
        ({"anyOf": []}, {("anyOf", REFUSED)}),
        ({"allOf": [True]}, {("type", REFUSED)}),
        ({"type": "array", "prefixItems": []}, {("prefixItems", REFUSED)}),
        ({"type": "object", "properties": ["a"]}, {("properties", REFUSED)}),
        ({"type": "string", "description": 7}, {("description", REWRITTEN)}),
        ({"type": "string", "examples": "a"}, {("examples", REWRITTEN)}),
        ({"type": "number", "exclusiveMinimum": True}, {("exclusiveMinimum", REWRITTEN)}),
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": False},
            {("uniqueItems", REWRITTEN)},
        ),
        ({"type": "number", "enum": [1, 2.5]}, {("enum", REWRITTEN)}),
        ({"type": "string", "example": "x"}, set()),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"},
            {("required", REWRITTEN)},
        ),
    ],
)
def test_odd_raw_schemas_are_rewritten_or_refused_never_passed_on(
    sub: dict[str, Any],
    expected: set[tuple[str, IssueAction]],
) -> None:
    schema, issues = convert({"x": sub})
    assert {(i.keyword, i.action) for i in issues} == expected
    if schema is not None:
        valid_schema(schema)


def test_draft_four_tuples_and_extra_items_merge_into_one_items_schema() -> None:
    schema, issues = convert(
        {
            "old": {"type": "array", "items": [{"type": "string"}, {"type": "string"}]},
            "extra": {
                "type": "array",
                "prefixItems": [{"type": "string"}],
                "items": {"type": "integer"},
            },
        },
    )
    assert schema is not None
    assert schema["properties"]["old"]["items"] == {"type": "STRING"}
    assert schema["properties"]["extra"]["items"] == {
        "anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]
    }
    assert found(issues) == {
        ("$.properties.old", "items", REWRITTEN),
        ("$.properties.extra", "prefixItems", REWRITTEN),
    }


def test_a_stricter_inclusive_bound_wins_over_an_exclusive_one() -> None:
    schema, _ = convert({"n": {"type": "integer", "minimum": 5, "exclusiveMinimum": 1}})
    assert schema is not None
    assert schema["properties"]["n"]["minimum"] == 5


def test_references_may_point_into_arrays_and_escaped_names() -> None:
    schema, issues = convert(
        {"x": {"$ref": "#/$defs/a~1b/anyOf/1"}},
        **{"$defs": {"a/b": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]}}},
    )
    assert schema is not None
    assert schema["properties"]["x"] == {"type": "STRING", "maxLength": 3}
    assert ("$.properties.x", "$ref", REWRITTEN) in found(issues)
