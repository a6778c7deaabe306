"""OpenAI strict mode: what each keyword becomes, and how the Restorer undoes the nulls."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

import pytest
from inline_snapshot import snapshot
from pydantic import BaseModel, Field

from handrail import RiskLevel, Tool, tool
from handrail.adapters._strict import FORMATS, Restorer, make_strict, report_unsupported
from handrail.adapters.base import IssueAction, SchemaIssue, UnsupportedSchemaError
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.declare.schema import compile_validator

STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "description",
    "title",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
}


def strict_violations(schema: object, path: str = "$") -> list[str]:
    """Where a schema breaks OpenAI's documented strict-mode rules."""
    found: list[str] = []
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            found += strict_violations(item, f"{path}[{i}]")
        return found
    if not isinstance(schema, dict):
        return found
    for key, value in schema.items():
        if key in {"properties", "$defs", "definitions"}:
            for name, sub in value.items():
                found += strict_violations(sub, f"{path}.{key}.{name}")
        elif key in {"items", "anyOf"}:
            found += strict_violations(value, f"{path}.{key}")
        elif key not in STRICT_KEYWORDS:
            found.append(f"{path}: {key}")
    if (key_format := schema.get("format")) and key_format not in FORMATS:
        found.append(f"{path}: format {key_format}")
    kinds = schema.get("type")
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        if schema.get("additionalProperties") is not False:
            found.append(f"{path}: additionalProperties")
        if list(schema.get("required", [])) != list(schema.get("properties", {})):
            found.append(f"{path}: required")
    return found


def strict(schema: dict[str, Any]) -> tuple[dict[str, Any], list[SchemaIssue]]:
    converted = make_strict("t.tool", schema)
    return converted.schema, list(converted.issues)


def actions(issues: list[SchemaIssue], keyword: str) -> set[IssueAction]:
    return {issue.action for issue in issues if issue.keyword == keyword}


def root(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


class Filters(BaseModel):
    in_stock: bool = False
    genres: Annotated[list[Literal["fiction", "history"]], Field(max_length=3)] = []


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="t")
def search(
    query: Annotated[str, Field(min_length=1, max_length=100, description="Title words")],
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
    filters: Filters | None = None,
    note: str | None = "x",
) -> None:
    """Search."""


def test_every_object_requires_all_its_properties_and_forbids_other_keys() -> None:
    converted = make_strict(search.name, search.spec.input_schema)
    assert strict_violations(converted.schema) == []
    assert converted.schema["required"] == ["query", "limit", "filters", "note"]
    assert converted.schema["$defs"]["Filters"]["additionalProperties"] is False


def test_the_strict_schema_is_itself_a_valid_schema() -> None:
    compile_validator(make_strict(search.name, search.spec.input_schema).schema)


def test_the_spec_schema_is_left_untouched() -> None:
    before = copy.deepcopy(dict(search.spec.input_schema))
    converted = make_strict(search.name, search.spec.input_schema)
    converted.schema["properties"].clear()
    assert dict(search.spec.input_schema) == before


def test_an_optional_field_becomes_nullable_and_a_required_one_does_not() -> None:
    schema = make_strict(search.name, search.spec.input_schema).schema
    assert schema["properties"]["limit"]["type"] == ["integer", "null"]
    assert schema["properties"]["query"]["type"] == "string"
    genres = schema["$defs"]["Filters"]["properties"]["genres"]
    assert genres["anyOf"][-1] == {"type": "null"}


def test_a_nullable_optional_field_keeps_its_one_null() -> None:
    schema = make_strict(search.name, search.spec.input_schema).schema
    assert schema["properties"]["filters"]["anyOf"] == [
        {"$ref": "#/$defs/Filters"},
        {"type": "null"},
    ]


def test_dropped_constraints_and_defaults_are_described_to_the_model() -> None:
    schema = make_strict(search.name, search.spec.input_schema).schema
    assert schema["properties"]["query"]["description"] == snapshot(
        "Title words (maxLength: 100; minLength: 1)"
    )
    assert schema["properties"]["limit"]["description"] == "default: 5"
    assert schema["properties"]["note"]["description"] == 'default: "x"'


def test_the_restorer_drops_the_nulls_sent_for_optional_fields() -> None:
    restorer = make_strict(search.name, search.spec.input_schema).restorer
    assert restorer is not None
    sent = {"query": "dune", "limit": None, "filters": {"in_stock": None, "genres": None}}
    assert restorer.restore(sent) == {"query": "dune", "filters": {}}


def test_the_restorer_keeps_a_null_for_a_field_that_is_nullable_in_the_original() -> None:
    restorer = make_strict(search.name, search.spec.input_schema).restorer
    assert restorer is not None
    sent = {"query": "dune", "limit": 3, "filters": None, "note": None}
    assert restorer.restore(sent) == sent


def test_the_restorer_returns_the_same_object_when_no_null_was_sent() -> None:
    restorer = make_strict(search.name, search.spec.input_schema).restorer
    assert restorer is not None
    sent = {"query": "dune", "limit": 3, "filters": {"in_stock": True, "genres": []}}
    assert restorer.restore(sent) is sent


def test_a_null_for_a_required_field_is_never_dropped() -> None:
    schema = root(when={"type": "string"})
    restorer = Restorer(schema)
    assert restorer.restore({"when": None}) == {"when": None}


def test_a_schema_with_nothing_optional_needs_no_restorer() -> None:
    assert make_strict("t.x", root(a={"type": "string"})).restorer is None


@pytest.mark.parametrize(
    ("keyword", "subschema"),
    [
        ("minLength", {"type": "string", "minLength": 1}),
        ("maxLength", {"type": "string", "maxLength": 9}),
        ("format", {"type": "string", "format": "uri"}),
        ("uniqueItems", {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        ("contains", {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}}),
        ("minProperties", {**root(a={"type": "string"}), "minProperties": 1}),
        ("maxProperties", {**root(a={"type": "string"}), "maxProperties": 1}),
        ("propertyNames", {**root(a={"type": "string"}), "propertyNames": {"maxLength": 3}}),
        ("not", {"type": "string", "not": {"const": "x"}}),
        ("dependentRequired", {**root(a={"type": "string"}), "dependentRequired": {"a": []}}),
        ("default", {"type": "integer", "default": 1}),
        ("examples", {"type": "integer", "examples": [1, 2]}),
        ("deprecated", {"type": "integer", "deprecated": True}),
        ("x-internal", {"type": "integer", "x-internal": "yes"}),
        ("oneOf", {"oneOf": [{"type": "string"}, {"type": "integer"}]}),
        ("allOf", {"allOf": [{"type": "string"}]}),
        ("$ref", {"$ref": "#/$defs/Word", "description": "a word"}),
        ("additionalProperties", {"type": "object", "properties": {"a": {"type": "string"}}}),
    ],
)
def test_a_keyword_that_only_narrows_or_annotates_is_rewritten(
    keyword: str,
    subschema: dict[str, Any],
) -> None:
    schema = {**root(field=subschema), "$defs": {"Word": {"type": "string"}}}
    converted, issues = strict(schema)
    assert actions(issues, keyword) == {IssueAction.REWRITTEN}
    assert strict_violations(converted) == []


@pytest.mark.parametrize(
    ("keyword", "subschema"),
    [
        ("additionalProperties", {"type": "object", "additionalProperties": {"type": "integer"}}),
        ("additionalProperties", {"type": "object", "additionalProperties": True}),
        ("patternProperties", {"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
        ("properties", {"type": "object"}),
        ("if", {"type": "string", "if": {"const": "a"}, "then": {"maxLength": 1}}),
        ("dependentSchemas", {**root(a={"type": "string"}), "dependentSchemas": {"a": {}}}),
        ("prefixItems", {"type": "array", "prefixItems": [{"type": "integer"}]}),
        ("items", {"type": "array"}),
        ("type", {"description": "anything at all"}),
        ("type", True),
        ("allOf", {"allOf": [root(a={"type": "string"}), root(b={"type": "string"})]}),
        ("$ref", {"$ref": "https://example.com/schema.json"}),
        ("$anchor", {"type": "string", "$anchor": "here"}),
        ("$dynamicRef", {"$dynamicRef": "#here"}),
        ("$id", {"type": "string", "$id": "https://example.com/inner"}),
        ("required", {"type": "object", "properties": {}, "required": ["ghost"]}),
        ("oneOf", {"anyOf": [{"type": "string"}], "oneOf": [{"type": "integer"}]}),
    ],
)
def test_a_keyword_that_adds_what_the_model_could_not_express_is_refused(
    keyword: str,
    subschema: object,
) -> None:
    _, issues = strict(root(field=subschema))
    assert IssueAction.REFUSED in actions(issues, keyword)


@pytest.mark.parametrize(
    "subschema",
    [
        {"type": "string", "pattern": "^[a-z]+$", "description": "d", "title": "T"},
        {"type": "string", "format": "date-time"},
        {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.5},
        {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        {"enum": ["a", "b"]},
        {"const": "x"},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
    ],
)
def test_keywords_in_the_strict_subset_are_sent_unchanged(subschema: dict[str, Any]) -> None:
    converted, issues = strict(root(field=subschema))
    assert converted["properties"]["field"] == subschema
    assert issues == []


def test_a_ref_with_siblings_becomes_a_one_branch_any_of() -> None:
    schema = {
        **root(word={"$ref": "#/$defs/Word", "description": "a word"}),
        "$defs": {"Word": {"type": "string"}},
    }
    converted, _ = strict(schema)
    assert converted["properties"]["word"] == {
        "anyOf": [{"$ref": "#/$defs/Word"}],
        "description": "a word",
    }


class Tree(BaseModel):
    label: str
    children: list[Tree] = []


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="t")
def plant(tree: Tree) -> None:
    """Plant a tree."""


def test_a_recursive_schema_keeps_its_references() -> None:
    converted = make_strict(plant.name, plant.spec.input_schema)
    children = converted.schema["$defs"]["Tree"]["properties"]["children"]
    assert children["anyOf"][0]["items"] == {"$ref": "#/$defs/Tree"}
    assert strict_violations(converted.schema) == []
    assert converted.restorer is not None
    sent = {"tree": {"label": "a", "children": [{"label": "b", "children": None}]}}
    assert converted.restorer.restore(sent) == {
        "tree": {"label": "a", "children": [{"label": "b"}]}
    }


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool | None = True


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="t")
def adopt(pet: Annotated[Cat | Dog, Field(discriminator="kind")]) -> None:
    """Adopt a pet."""


def test_one_of_is_sent_as_any_of_and_the_restorer_follows_the_matching_branch() -> None:
    converted = make_strict(adopt.name, adopt.spec.input_schema)
    assert "anyOf" in converted.schema["properties"]["pet"]
    assert actions(list(converted.issues), "oneOf") == {IssueAction.REWRITTEN}
    assert strict_violations(converted.schema) == []
    restorer = converted.restorer
    assert restorer is not None
    assert restorer.restore({"pet": {"kind": "cat", "lives": None}}) == {"pet": {"kind": "cat"}}
    # Dog.good is nullable in the original: its null stays.
    dog = {"pet": {"kind": "dog", "good": None}}
    assert restorer.restore(dog) == dog


def test_when_no_branch_validates_the_restorer_takes_the_closest_one() -> None:
    cat = {"type": "object", "properties": {"kind": {"const": "cat"}, "n": {"type": "integer"}}}
    schema = root(pet={"anyOf": [cat, {"type": "object", "properties": {"k": {"const": "x"}}}]})
    restored = Restorer(schema).restore({"pet": {"kind": "cat", "n": None, "extra": 1.5}})
    assert restored == {"pet": {"kind": "cat", "extra": 1.5}}


def test_a_root_without_properties_becomes_a_tool_without_arguments() -> None:
    converted, issues = strict({"type": "object"})
    assert converted == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert actions(issues, "properties") == {IssueAction.REWRITTEN}


def test_a_nested_free_form_object_is_refused_but_a_root_one_is_not() -> None:
    _, nested = strict(root(meta={"type": "object"}))
    _, top = strict({"type": "object"})
    assert IssueAction.REFUSED in actions(nested, "properties")
    assert IssueAction.REFUSED not in {issue.action for issue in top}


def test_more_than_five_thousand_properties_are_refused() -> None:
    many = {f"p{i}": {"type": "integer"} for i in range(5001)}
    _, issues = strict(root(**many))
    assert IssueAction.REFUSED in actions(issues, "properties")


def test_objects_nested_more_than_ten_levels_are_refused() -> None:
    schema: dict[str, Any] = root(leaf={"type": "integer"})
    for _ in range(10):
        schema = root(inner=schema)
    _, issues = strict(schema)
    assert IssueAction.REFUSED in actions(issues, "properties")


def test_ten_levels_of_objects_are_accepted() -> None:
    schema: dict[str, Any] = root(leaf={"type": "integer"})
    for _ in range(9):
        schema = root(inner=schema)
    _, issues = strict(schema)
    assert all(issue.action is IssueAction.REWRITTEN for issue in issues)


def test_more_than_a_thousand_enum_values_are_refused() -> None:
    _, issues = strict(root(pick={"enum": list(range(1001))}))
    assert IssueAction.REFUSED in actions(issues, "enum")


def test_a_large_enum_with_long_values_is_refused() -> None:
    _, issues = strict(root(pick={"enum": [f"{i:0>60}" for i in range(260)]}))
    assert IssueAction.REFUSED in actions(issues, "enum")


def test_every_issue_names_its_tool_and_a_json_path() -> None:
    converted = make_strict(search.name, search.spec.input_schema)
    assert converted.issues
    assert all(issue.tool == "t.search" for issue in converted.issues)
    assert all(issue.path.startswith("$") for issue in converted.issues)


def test_report_only_names_unsupported_keywords_as_sent_unchanged() -> None:
    issues = report_unsupported(search.name, search.spec.input_schema)
    keywords = {(issue.path, issue.keyword) for issue in issues}
    assert ("$.properties.query", "maxLength") in keywords
    assert all(issue.action is IssueAction.UNENFORCED for issue in issues)
    assert all(issue.keyword != "required" for issue in issues)


free_form = Tool.from_json_schema(
    name="t.tag",
    description="Attach labels.",
    input_schema={
        "type": "object",
        "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}},
        "required": ["labels"],
    },
    fn=lambda arguments, ctx: None,
    risk=RiskLevel.L0_PUBLIC_READ,
)


@pytest.mark.parametrize("adapter", [OpenAIChatAdapter, OpenAIResponsesAdapter])
def test_a_schema_strict_mode_refuses_fails_the_whole_export_with_its_issues(
    adapter: type[OpenAIChatAdapter | OpenAIResponsesAdapter],
) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        adapter(strict=True).tool_definitions([search.spec, free_form.spec])
    assert caught.value.provider == adapter.provider
    assert [(i.tool, i.keyword) for i in caught.value.issues] == [
        ("t.tag", "additionalProperties"),
    ]


@pytest.mark.parametrize("adapter", [OpenAIChatAdapter, OpenAIResponsesAdapter])
def test_without_strict_mode_the_same_schema_is_sent_unchanged_and_reported(
    adapter: type[OpenAIChatAdapter | OpenAIResponsesAdapter],
) -> None:
    definitions = adapter(strict=False).tool_definitions([free_form.spec])
    [payload] = definitions.payload
    parameters = payload.get("parameters") or payload["function"]["parameters"]
    assert parameters == dict(free_form.spec.input_schema)
    assert [(i.keyword, i.action) for i in definitions.issues] == [
        ("additionalProperties", IssueAction.UNENFORCED),
    ]
    assert definitions.restore == {}
