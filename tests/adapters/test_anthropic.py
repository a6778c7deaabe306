"""AnthropicAdapter: definitions, tool choice, calls in and results out.

Fixtures follow the examples of Anthropic's tool-use documentation; every payload is
checked against the official SDK's TypedDicts and every response is also parsed as
the SDK's own `Message` model.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from anthropic.types import (
    Message,
    MessageParam,
    TextBlockParam,
    ToolChoiceParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from inline_snapshot import snapshot
from pydantic import TypeAdapter

from handrail import Envelope, ErrorCode, ErrorDetail, Gate, Principal, RiskLevel, Status, ToolCall
from handrail.adapters import anthropic
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import (
    Adapter,
    IssueAction,
    ToolChoice,
    ToolChoiceMode,
    UnsupportedSchemaError,
    UntranslatableError,
)
from handrail.declare.registry import Registry
from handrail.errors import ConfigurationError
from handrail.shaping.marking import DataMarker, read_block
from handrail.spec import SideEffect, ToolSpec

_BLOCKS: dict[str, Any] = {
    "text": TextBlockParam,
    "tool_use": ToolUseBlockParam,
    "tool_result": ToolResultBlockParam,
}


def _consume(value: object) -> None:
    """Walks a validated value; pydantic checks `Iterable` fields only when iterated."""
    if isinstance(value, Mapping):
        for item in value.values():
            _consume(item)
    elif isinstance(value, list | tuple | Iterator):
        for item in value:
            _consume(item)


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def conforms(typed: Any, value: object) -> None:
    """`value` is valid as the SDK type `typed`, with no key a TypedDict does not know.

    Adapters are kept: a lazily checked iterable needs its adapter alive when consumed.
    """
    adapter = _ADAPTERS.setdefault(typed, TypeAdapter(typed))
    _consume(adapter.validate_python(value, strict=True))
    known = getattr(typed, "__optional_keys__", None)
    if known is not None and isinstance(value, Mapping):
        assert set(value) <= set(known) | set(typed.__required_keys__)


def conforms_message(message: dict[str, Any]) -> None:
    conforms(MessageParam, message)
    if isinstance(message["content"], list):
        for block in message["content"]:
            conforms(_BLOCKS[block["type"]], block)


# Anthropic's documented get_weather tool.
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {
            "type": "string",
            "description": "The city and state, e.g. San Francisco, CA",
        },
        "unit": {
            "type": "string",
            "enum": ["celsius", "fahrenheit"],
            "description": "The unit of temperature, either 'celsius' or 'fahrenheit'",
        },
    },
    "required": ["location"],
}

# Anthropic's documented response with a tool_use block.
WEATHER_RESPONSE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "model": "claude-opus-4-6",
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "role": "assistant",
    "content": [
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA"},
        },
    ],
    "usage": {"input_tokens": 472, "output_tokens": 89},
}


def spec(schema: Mapping[str, Any], name: str = "weather.get_weather") -> ToolSpec:
    return ToolSpec(
        name=name,
        description="Get the current weather in a given location",
        input_schema=schema,
        schema_version="1",
        description_version="1",
        risk=RiskLevel.L0_PUBLIC_READ,
        side_effect=SideEffect.NONE,
    )


def response(*blocks: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {**WEATHER_RESPONSE, "content": list(blocks), "stop_reason": stop_reason}


def tool_use(
    call_id: str, name: str = "weather__get_weather", **arguments: object
) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


TEXT = {"type": "text", "text": "Let me look."}


def test_the_adapter_keeps_the_adapter_protocol_and_says_whether_it_is_strict() -> None:
    adapter: Adapter = AnthropicAdapter(strict=False)
    assert adapter.provider == "anthropic"
    assert AnthropicAdapter(strict=True).strict
    assert not AnthropicAdapter(strict=False).strict


# --- definitions ---------------------------------------------------------------------------


def test_the_documented_tool_definition_is_produced_as_documented() -> None:
    definitions = AnthropicAdapter(strict=False).tool_definitions(
        [spec(WEATHER_SCHEMA, "get_weather")]
    )
    assert definitions.provider == "anthropic"
    assert definitions.issues == ()
    assert definitions.payload == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER_SCHEMA,
        },
    ]


@pytest.mark.parametrize("strict", [False, True])
def test_definitions_match_the_sdk_tool_param(
    registry: Registry,
    principal: Principal,
    strict: bool,
) -> None:
    definitions = AnthropicAdapter(strict=strict).tool_definitions(registry.exposed(principal))
    for definition in definitions.payload:
        conforms(ToolParam, definition)
        assert definition.get("strict", False) is strict


def test_definitions_share_no_mutable_part_with_the_spec(registry: Registry) -> None:
    searched = registry.get("shop.search").spec
    before = copy.deepcopy(dict(searched.input_schema))
    for strict in (False, True):
        [definition] = AnthropicAdapter(strict=strict).tool_definitions([searched]).payload
        definition["input_schema"]["properties"].clear()
        definition["input_schema"]["$defs"]["Filters"]["properties"].clear()
    assert dict(searched.input_schema) == before


def test_strict_definitions_move_unsupported_constraints_into_the_description(
    registry: Registry,
) -> None:
    definitions = AnthropicAdapter(strict=True).tool_definitions([registry.get("shop.search").spec])
    schema = definitions.payload[0]["input_schema"]
    assert schema["properties"]["limit"] == snapshot(
        {"default": 5, "type": "integer", "description": "(maximum: 20, minimum: 1)"},
    )
    assert schema["properties"]["query"]["description"] == snapshot(
        "Words in the title\n\n(maxLength: 100, minLength: 1)",
    )
    assert schema["$defs"]["Filters"]["additionalProperties"] is False
    assert {(i.path, i.keyword, i.action) for i in definitions.issues} == snapshot(
        {
            ('$["$defs"].Filters.properties.genres', "maxItems", IssueAction.REWRITTEN),
            ('$["$defs"].Filters', "additionalProperties", IssueAction.REWRITTEN),
            ("$.properties.query", "maxLength", IssueAction.REWRITTEN),
            ("$.properties.query", "minLength", IssueAction.REWRITTEN),
            ("$.properties.limit", "maximum", IssueAction.REWRITTEN),
            ("$.properties.limit", "minimum", IssueAction.REWRITTEN),
        },
    )
    assert all(issue.tool == "shop.search" for issue in definitions.issues)


def _one_property(fragment: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"p": fragment}, "additionalProperties": False}


# The strict-mode table: what is kept, rewritten (the gate enforces the original) or refused.
STRICT_CASES = [
    ({"type": "integer", "minimum": 1}, "minimum", IssueAction.REWRITTEN),
    ({"type": "number", "exclusiveMaximum": 5}, "exclusiveMaximum", IssueAction.REWRITTEN),
    ({"type": "integer", "multipleOf": 2}, "multipleOf", IssueAction.REWRITTEN),
    ({"type": "string", "minLength": 2}, "minLength", IssueAction.REWRITTEN),
    ({"type": "string", "format": "credit-card"}, "format", IssueAction.REWRITTEN),
    ({"type": "string", "pattern": r"^(?=a)\w+$"}, "pattern", IssueAction.REWRITTEN),
    ({"type": "string", "pattern": r"\bword\b"}, "pattern", IssueAction.REWRITTEN),
    ({"type": "string", "pattern": r"(a)\1"}, "pattern", IssueAction.REWRITTEN),
    (
        {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "minItems",
        IssueAction.REWRITTEN,
    ),
    (
        {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "maxItems",
        IssueAction.REWRITTEN,
    ),
    (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "uniqueItems",
        IssueAction.REWRITTEN,
    ),
    (
        {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}},
        "items",
        IssueAction.REWRITTEN,
    ),
    (
        {"type": "object", "properties": {}, "minProperties": 1},
        "minProperties",
        IssueAction.REWRITTEN,
    ),
    ({"type": "object", "properties": {}}, "additionalProperties", IssueAction.REWRITTEN),
    (
        {"type": "object", "additionalProperties": True},
        "additionalProperties",
        IssueAction.REWRITTEN,
    ),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf", IssueAction.REWRITTEN),
    ({"type": "string", "not": {"const": "x"}}, "not", IssueAction.REWRITTEN),
    ({"type": "string", "examples": ["a"]}, "examples", IssueAction.REWRITTEN),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}},
        "additionalProperties",
        IssueAction.REFUSED,
    ),
    (
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        "patternProperties",
        IssueAction.REFUSED,
    ),
    ({"enum": [{"a": 1}, {"b": 2}]}, "enum", IssueAction.REFUSED),
    ({"const": [1, 2]}, "const", IssueAction.REFUSED),
    ({"$ref": "https://example.com/schema.json"}, "$ref", IssueAction.REFUSED),
    ({"description": "anything at all"}, "type", IssueAction.REFUSED),
    ({"anyOf": [{"type": "string"}], "oneOf": [{"type": "integer"}]}, "oneOf", IssueAction.REFUSED),
    (True, "type", IssueAction.REFUSED),
]


@pytest.mark.parametrize(("fragment", "keyword", "action"), STRICT_CASES)
def test_strict_mode_rewrites_or_refuses_each_unsupported_feature_out_loud(
    fragment: dict[str, Any],
    keyword: str,
    action: IssueAction,
) -> None:
    tool = spec(_one_property(fragment))
    if action is IssueAction.REFUSED:
        with pytest.raises(UnsupportedSchemaError) as caught:
            AnthropicAdapter(strict=True).tool_definitions([tool])
        issues = caught.value.issues
        assert caught.value.provider == "anthropic"
    else:
        definitions = AnthropicAdapter(strict=True).tool_definitions([tool])
        issues = definitions.issues
        sent = definitions.payload[0]["input_schema"]["properties"]["p"]
        assert keyword not in sent or keyword == "additionalProperties"
        conforms(ToolParam, definitions.payload[0])
    assert (keyword, action) in {(i.keyword, i.action) for i in issues}
    assert all(i.path.startswith("$.properties.p") for i in issues if i.keyword == keyword)


@pytest.mark.parametrize(
    "fragment",
    [
        {"type": "string", "format": "date-time", "pattern": "^[0-9]+$", "title": "T"},
        {"type": ["string", "null"], "default": None},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"enum": ["a", 1, None, True]},
    ],
)
def test_strict_mode_keeps_what_it_supports_without_an_issue(fragment: dict[str, Any]) -> None:
    definitions = AnthropicAdapter(strict=True).tool_definitions([spec(_one_property(fragment))])
    assert definitions.issues == ()
    assert definitions.payload[0]["input_schema"]["properties"]["p"] == fragment


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Node"}},
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                    },
                },
            },
        },
        {"type": "object", "properties": {"again": {"$ref": "#"}}},
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
        },
    ],
)
def test_strict_mode_refuses_recursive_schemas(schema: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        AnthropicAdapter(strict=True).tool_definitions([spec(schema)])
    assert ("$ref", IssueAction.REFUSED) in {(i.keyword, i.action) for i in caught.value.issues}


def test_strict_mode_follows_shared_and_nested_references_without_calling_them_recursive() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/Point"},
            "b": {"$ref": "#/$defs/Wrapper"},
            "c": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "d": {"$ref": "#/properties/c/anyOf/0"},
            "e": {"$ref": "#/properties/c/anyOf/9"},
        },
        "$defs": {
            "Point": {"type": "object", "properties": {"x": {"type": "number"}}},
            "Wrapper": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        },
        "additionalProperties": False,
    }
    definitions = AnthropicAdapter(strict=True).tool_definitions([spec(schema)])
    assert {(i.keyword, i.action) for i in definitions.issues} == {
        ("additionalProperties", IssueAction.REWRITTEN),
    }


def test_recursive_schemas_are_sent_unchanged_without_strict_mode() -> None:
    schema = {"type": "object", "properties": {"again": {"$ref": "#"}}}
    definitions = AnthropicAdapter(strict=False).tool_definitions([spec(schema)])
    assert definitions.issues == ()
    assert definitions.payload[0]["input_schema"] == schema


def test_a_top_level_combinator_beside_properties_is_dropped_and_reported() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    definitions = AnthropicAdapter(strict=False).tool_definitions([spec(schema)])
    assert "anyOf" not in definitions.payload[0]["input_schema"]
    [issue] = definitions.issues
    assert (issue.path, issue.keyword, issue.action) == ("$", "anyOf", IssueAction.REWRITTEN)


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}, "oneOf"),
        ({"type": "object", "properties": {"filter[id]": {"type": "string"}}}, "properties"),
        ({"type": "object", "properties": {"x" * 65: {"type": "string"}}}, "properties"),
        ({"type": "array", "items": {"type": "string"}}, "type"),
    ],
)
def test_what_anthropic_refuses_in_any_mode_is_refused_at_export(
    schema: dict[str, Any],
    keyword: str,
) -> None:
    with pytest.raises(UnsupportedSchemaError) as caught:
        AnthropicAdapter(strict=False).tool_definitions([spec(schema)])
    assert (keyword, IssueAction.REFUSED) in {(i.keyword, i.action) for i in caught.value.issues}


def test_a_root_without_object_type_gets_it_and_says_so() -> None:
    definitions = AnthropicAdapter(strict=False).tool_definitions([spec({"properties": {}})])
    assert definitions.payload[0]["input_schema"] == {"properties": {}, "type": "object"}
    assert [(i.keyword, i.action) for i in definitions.issues] == [("type", IssueAction.REWRITTEN)]


def test_every_refused_feature_of_every_tool_is_named_at_once() -> None:
    bad = [
        spec({"oneOf": []}, "a.one"),
        spec({"type": "object", "properties": {"a b": {}}}, "a.two"),
    ]
    with pytest.raises(UnsupportedSchemaError) as caught:
        AnthropicAdapter(strict=False).tool_definitions(bad)
    assert {i.tool for i in caught.value.issues} == {"a.one", "a.two"}


def test_the_module_level_export_is_the_adapters_payload(registry: Registry) -> None:
    specs = registry.specs()
    assert (
        anthropic.tool_definitions(specs)
        == AnthropicAdapter(strict=False).tool_definitions(specs).payload
    )


def test_the_module_level_export_refuses_a_schema_that_needs_a_rewrite() -> None:
    with pytest.raises(UnsupportedSchemaError):
        anthropic.tool_definitions([spec({"properties": {}})])


@pytest.mark.anyio
async def test_the_gate_still_enforces_what_strict_mode_dropped(
    registry: Registry,
    gate: Gate,
    principal: Principal,
) -> None:
    definitions = AnthropicAdapter(strict=True).tool_definitions(registry.exposed(principal))
    query = definitions.payload[0]["input_schema"]["properties"]["query"]
    assert "maxLength" not in query
    [call] = AnthropicAdapter(strict=False).parse_calls(
        response(tool_use("toolu_1", "shop__search", query="x" * 101)),
    )
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "$.query" in envelope.field_errors


# --- tool choice ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (ToolChoice(), {"type": "auto"}),
        (ToolChoice(mode=ToolChoiceMode.NONE), {"type": "none"}),
        (ToolChoice(mode=ToolChoiceMode.REQUIRED), {"type": "any"}),
        (ToolChoice.forced("shop.search"), {"type": "tool", "name": "shop__search"}),
    ],
)
def test_each_tool_choice_maps_to_its_anthropic_form(
    choice: ToolChoice,
    expected: dict[str, Any],
) -> None:
    value = AnthropicAdapter(strict=False).tool_choice(choice)
    assert value == expected
    conforms(ToolChoiceParam, value)


def test_every_tool_choice_mode_has_an_anthropic_form() -> None:
    adapter = AnthropicAdapter(strict=False)
    for mode in ToolChoiceMode:
        choice = ToolChoice.forced("a") if mode is ToolChoiceMode.TOOL else ToolChoice(mode=mode)
        conforms(ToolChoiceParam, adapter.tool_choice(choice))


def test_without_parallel_calls_the_choice_disables_parallel_tool_use_except_for_none() -> None:
    adapter = AnthropicAdapter(strict=False, parallel_calls=False)
    for mode in (ToolChoiceMode.AUTO, ToolChoiceMode.REQUIRED):
        value = adapter.tool_choice(ToolChoice(mode=mode))
        assert value["disable_parallel_tool_use"] is True
        conforms(ToolChoiceParam, value)
    assert adapter.tool_choice(ToolChoice.forced("a"))["disable_parallel_tool_use"] is True
    assert adapter.tool_choice(ToolChoice(mode=ToolChoiceMode.NONE)) == {"type": "none"}


def test_forcing_a_tool_whose_name_cannot_map_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        AnthropicAdapter(strict=False).tool_choice(ToolChoice.forced("shop.get__book"))


# --- calls in ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(Message.model_validate, id="sdk-message"),
        pytest.param(lambda r: r, id="dict"),
        pytest.param(json.dumps, id="json-text"),
        pytest.param(lambda r: json.dumps(r).encode(), id="json-bytes"),
    ],
)
def test_the_documented_response_parses_in_every_form(form: Any) -> None:
    [call] = AnthropicAdapter(strict=False).parse_calls(form(WEATHER_RESPONSE))
    assert call.id == "toolu_01A09q90qw90lq917835lq9"
    assert call.name == "get_weather"
    assert call.arguments == {"location": "San Francisco, CA"}
    assert call.provider == "anthropic"
    assert call.defect is None
    assert call.raw is not None
    assert (call.raw["id"] if isinstance(call.raw, dict) else call.raw.id) == call.id  # type: ignore[attr-defined]


def test_names_map_back_and_parallel_calls_keep_their_order_and_ids() -> None:
    message = Message.model_validate(
        response(
            TEXT,
            tool_use("toolu_b", "shop__search", query="dune"),
            tool_use("toolu_a", "shop__stock", book_id="b1"),
        ),
    )
    calls = AnthropicAdapter(strict=False).parse_calls(message)
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("toolu_b", "shop.search", {"query": "dune"}),
        ("toolu_a", "shop.stock", {"book_id": "b1"}),
    ]


def test_blocks_other_than_tool_use_are_not_calls() -> None:
    message = response(
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        TEXT,
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": 1}},
    )
    assert AnthropicAdapter(strict=False).parse_calls(Message.model_validate(message)) == []
    assert AnthropicAdapter(strict=False).parse_calls(message) == []


def test_under_max_tokens_only_a_tool_use_that_ends_the_content_is_defective() -> None:
    calls = AnthropicAdapter(strict=False).parse_calls(
        response(tool_use("toolu_1", q=1), tool_use("toolu_2", q=2), stop_reason="max_tokens"),
    )
    assert [c.defect is None for c in calls] == [True, False]


def test_under_max_tokens_a_tool_use_followed_by_text_is_complete() -> None:
    calls = AnthropicAdapter(strict=False).parse_calls(
        response(tool_use("toolu_1", q=1), TEXT, stop_reason="max_tokens"),
    )
    assert [c.defect for c in calls] == [None]


@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_context_window_exceeded"])
def test_a_truncated_response_makes_its_last_call_defective(stop_reason: str) -> None:
    message = Message.model_validate(response(tool_use("toolu_1", q=1), stop_reason=stop_reason))
    [call] = AnthropicAdapter(strict=False).parse_calls(message)
    assert call.defect is not None


def test_a_refusal_withdraws_every_call_of_the_response() -> None:
    calls = AnthropicAdapter(strict=False).parse_calls(
        response(tool_use("toolu_1", q=1), TEXT, tool_use("toolu_2"), stop_reason="refusal"),
    )
    assert [c.defect is not None for c in calls] == [True, True]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "id": "toolu_1", "name": "weather__get_weather", "input": [1, 2]},
        {"type": "tool_use", "id": "toolu_1", "name": "weather__get_weather", "input": '{"a":1}'},
        {"type": "tool_use", "id": "toolu_1", "name": "weather__get_weather"},
        {"type": "tool_use", "name": "weather__get_weather", "input": {}},
        {"type": "tool_use", "id": 7, "name": "weather__get_weather", "input": {}},
    ],
)
def test_a_tool_use_block_without_an_id_or_an_input_object_is_a_defective_call(
    block: dict[str, Any],
) -> None:
    [call] = AnthropicAdapter(strict=False).parse_calls(response(block))
    assert call.defect is not None
    assert isinstance(call.id, str)


@pytest.mark.parametrize(
    "bad",
    ["not json", b"\xff", json.dumps([1]), {"type": "error"}, {"content": "text"}, 42],
)
def test_something_that_is_not_a_messages_response_is_untranslatable(bad: object) -> None:
    with pytest.raises(UntranslatableError):
        AnthropicAdapter(strict=False).parse_calls(bad)


# --- results out ---------------------------------------------------------------------------


def _envelope(call_id: str, *, error: bool = False) -> Envelope:
    if error:
        return Envelope(
            call_id=call_id,
            tool="shop.stock",
            status=Status.ERROR,
            summary="No such book.",
            error=ErrorDetail(code=ErrorCode.NOT_FOUND),
        )
    return Envelope(call_id=call_id, tool="shop.search", status=Status.OK, summary="ok", data=[1])


def test_all_results_of_a_turn_go_back_in_one_user_message_in_call_order() -> None:
    calls = [
        ToolCall(id="toolu_1", name="shop.search", arguments={}),
        ToolCall(id="toolu_2", name="shop.stock", arguments={}),
    ]
    marker = DataMarker(token=iter(["a" * 32, "b" * 32]).__next__)
    [message] = AnthropicAdapter(strict=False, marker=marker).render_results(
        calls,
        [_envelope("toolu_2", error=True), _envelope("toolu_1")],
    )
    conforms_message(message)
    assert message["role"] == "user"
    assert [(b["tool_use_id"], b["is_error"]) for b in message["content"]] == [
        ("toolu_1", False),
        ("toolu_2", True),
    ]
    refused = read_block(message["content"][1]["content"])
    assert refused is not None
    assert refused.boundary == "b" * 32
    assert json.loads(refused.body)["error_type"] == "NOT_FOUND"
    assert message["content"][0]["content"] == (
        f'<<<handrail-data {"a" * 32} source="tool:shop.search" trust="untrusted">>>\n'
        f"{_envelope('toolu_1').to_json()}\n<<<end handrail-data {'a' * 32}>>>"
    )


def test_a_turn_without_calls_renders_no_message() -> None:
    assert AnthropicAdapter(strict=False).render_results([], []) == []


def test_a_result_for_an_id_no_call_has_is_the_hosts_error() -> None:
    calls = [ToolCall(id="toolu_1", name="shop.search", arguments={})]
    with pytest.raises(ConfigurationError):
        AnthropicAdapter(strict=False).render_results(
            calls, [_envelope("toolu_1"), _envelope("toolu_9")]
        )
