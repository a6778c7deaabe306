"""Gemini wire format: declarations, tool config, calls in (whole and streamed), results out.

Every payload is checked against the official `google-genai` SDK models, which take the
REST camelCase shape and reject unknown fields.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from google.genai import types
from hypothesis import given
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import BaseModel

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    tool,
)
from handrail.adapters import gemini
from handrail.adapters._names import to_wire_name
from handrail.adapters.base import (
    Adapter,
    Definitions,
    IssueAction,
    ToolChoice,
    ToolChoiceMode,
    UnsupportedSchemaError,
    UntranslatableError,
)
from handrail.adapters.gemini import GEMINI_NAME, ID_PREFIX, PROVIDER, GeminiAdapter
from handrail.errors import ConfigurationError
from handrail.shaping.marking import read_block
from handrail.testing import MemoryAuditSink

ADAPTER = GeminiAdapter()


def valid(model: type[BaseModel], payload: dict[str, Any]) -> None:
    """The SDK model takes the payload and gives back exactly what it was given."""
    parsed = model.model_validate(payload)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == payload


def response(*parts: dict[str, Any], finish: str | None = "STOP", **extra: Any) -> dict[str, Any]:
    """A REST `GenerateContentResponse` with one candidate, as the Gemini docs show them."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", **extra}


def call(name: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    function_call: dict[str, Any] = {"name": name, **extra}
    if args is not None:
        function_call["args"] = args
    return {"functionCall": function_call}


# From the function-calling guide: one call, and three parallel calls in one turn.
LIGHTS = response(
    call("set_light_values", {"brightness": 25, "color_temp": "warm"}),
    responseId="resp-lights",
)
PARTY = response(
    call("power_disco_ball", {"power": True}),
    call("start_music", {"energetic": True, "loud": True}),
    call("dim_lights", {"brightness": 0.5}),
    responseId="resp-party",
)


def stock_spec(registry: Registry) -> Any:
    return registry.get("shop.stock").spec


# --- definitions ---------------------------------------------------------------------------


def test_declarations_sit_in_one_tool_with_an_openapi_schema(registry: Registry) -> None:
    definitions = ADAPTER.tool_definitions([stock_spec(registry)])
    assert definitions.provider == PROVIDER
    assert definitions.payload == snapshot(
        [
            {
                "functionDeclarations": [
                    {
                        "name": "shop__stock",
                        "description": "How many copies of a book are in stock (a sync tool).",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"book_id": {"type": "STRING", "maxLength": 16}},
                            "required": ["book_id"],
                        },
                    },
                ],
            },
        ],
    )
    [issue] = definitions.issues
    assert (issue.path, issue.keyword, issue.action) == (
        "$",
        "additionalProperties",
        IssueAction.REWRITTEN,
    )
    valid(types.Tool, definitions.payload[0])


def test_every_exposed_declaration_validates_against_the_sdk(
    registry: Registry,
    principal: Principal,
) -> None:
    definitions = ADAPTER.tool_definitions(registry.exposed(principal))
    [payload] = definitions.payload
    valid(types.Tool, payload)
    names = [d["name"] for d in payload["functionDeclarations"]]
    assert names == ["shop__search", "shop__stock"]
    assert all(GEMINI_NAME.fullmatch(name) for name in names)
    keywords = {(i.path, i.keyword) for i in definitions.issues}
    assert ("$.properties.filters", "$ref") in keywords
    assert ("$.properties.filters", "anyOf") in keywords
    assert all(i.action is IssueAction.REWRITTEN for i in definitions.issues)


def test_no_specs_means_no_tools() -> None:
    assert ADAPTER.tool_definitions([]).payload == []


def test_a_tool_without_parameters_declares_none() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="clock")
    def now() -> str:
        """The time."""
        return "noon"

    [payload] = ADAPTER.tool_definitions([now.spec]).payload
    assert payload["functionDeclarations"] == [{"name": "clock__now", "description": "The time."}]
    valid(types.Tool, payload)


def test_the_json_schema_option_sends_the_original_schema_untouched(registry: Registry) -> None:
    spec = registry.get("shop.search").spec
    definitions = GeminiAdapter(parameters_json_schema=True).tool_definitions([spec])
    [declaration] = definitions.payload[0]["functionDeclarations"]
    assert declaration["parametersJsonSchema"] == dict(spec.input_schema)
    assert "parameters" not in declaration
    assert definitions.issues == ()
    valid(types.Tool, definitions.payload[0])


def test_the_plain_export_sends_json_schema_so_that_nothing_is_rewritten_unreported(
    registry: Registry,
    principal: Principal,
) -> None:
    specs = registry.exposed(principal)
    payload = gemini.tool_definitions(specs)
    assert payload == GeminiAdapter(parameters_json_schema=True).tool_definitions(specs).payload
    valid(types.Tool, payload[0])


def test_declarations_share_no_mutable_part_with_the_spec(registry: Registry) -> None:
    spec = registry.get("shop.search").spec
    before = copy.deepcopy(dict(spec.input_schema))
    for adapter in (ADAPTER, GeminiAdapter(parameters_json_schema=True)):
        [declaration] = adapter.tool_definitions([spec]).payload[0]["functionDeclarations"]
        schema = declaration.get("parameters") or declaration["parametersJsonSchema"]
        schema["properties"].clear()
    assert dict(spec.input_schema) == before


def test_schemas_gemini_cannot_take_are_refused_together_with_every_reason() -> None:
    recursive = Tool.from_json_schema(
        name="tree.walk",
        description="Walk a tree.",
        input_schema={
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
                    },
                },
            },
        },
        fn=lambda arguments, ctx: None,
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    mapping = Tool.from_json_schema(
        name="tree.tag",
        description="Tag things.",
        input_schema={
            "type": "object",
            "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
        },
        fn=lambda arguments, ctx: None,
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    with pytest.raises(UnsupportedSchemaError) as caught:
        ADAPTER.tool_definitions([recursive.spec, mapping.spec])
    refused = {(i.tool, i.keyword) for i in caught.value.issues}
    assert refused == {("tree.walk", "$ref"), ("tree.tag", "additionalProperties")}
    assert all(i.action is IssueAction.REFUSED for i in caught.value.issues)
    assert caught.value.provider == PROVIDER
    # The option that sends JSON Schema takes both.
    GeminiAdapter(parameters_json_schema=True).tool_definitions([recursive.spec, mapping.spec])


@tool(risk=RiskLevel.L4_FORBIDDEN, namespace="shop")
def wipe() -> None:
    """Remove everything; registered only to prove it is never sent."""


@pytest.mark.invariant(9)
def test_a_forbidden_spec_is_never_declared() -> None:
    with pytest.raises(ConfigurationError):
        ADAPTER.tool_definitions([wipe.spec])


word = st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,6}\Z")
mappable_name = (
    st.lists(st.lists(word, min_size=1, max_size=3).map("_".join), min_size=1, max_size=4)
    .map(".".join)
    .filter(lambda n: len(n) + n.count(".") <= 64)
)


@given(mappable_name)
def test_every_wire_name_handrail_makes_is_a_valid_gemini_name(name: str) -> None:
    assert GEMINI_NAME.fullmatch(to_wire_name(name))


@pytest.mark.parametrize("name", ["1tool", "-tool", "tool name", "tööl", "a" * 65, ""])
def test_the_gemini_name_rule_refuses_what_gemini_refuses(name: str) -> None:
    assert not GEMINI_NAME.fullmatch(name)


# --- tool choice -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        (ToolChoice(), {"mode": "AUTO"}),
        (ToolChoice(mode=ToolChoiceMode.NONE), {"mode": "NONE"}),
        (ToolChoice(mode=ToolChoiceMode.REQUIRED), {"mode": "ANY"}),
        (
            ToolChoice.forced("shop.search"),
            {"mode": "ANY", "allowedFunctionNames": ["shop__search"]},
        ),
    ],
    ids=["auto", "none", "required", "tool"],
)
def test_tool_choice_becomes_a_function_calling_config(
    choice: ToolChoice,
    config: dict[str, Any],
) -> None:
    payload = ADAPTER.tool_choice(choice)
    assert payload == {"functionCallingConfig": config}
    valid(types.ToolConfig, payload)


def test_the_adapter_keeps_the_adapter_contract() -> None:
    adapter: Adapter = GeminiAdapter()
    assert adapter.provider == "gemini"


# --- calls in ------------------------------------------------------------------------------


def test_a_documented_call_becomes_a_tool_call_with_its_arguments() -> None:
    [parsed] = ADAPTER.parse_calls(LIGHTS)
    assert parsed.name == "set_light_values"
    assert parsed.arguments == {"brightness": 25, "color_temp": "warm"}
    assert parsed.provider == PROVIDER
    assert parsed.defect is None
    assert parsed.id.startswith(ID_PREFIX)
    assert parsed.raw == LIGHTS["candidates"][0]["content"]["parts"][0]


def test_parsing_the_same_response_twice_gives_the_same_ids() -> None:
    first = [c.id for c in ADAPTER.parse_calls(PARTY)]
    again = [c.id for c in GeminiAdapter().parse_calls(json.dumps(PARTY))]
    assert first == again
    assert len(set(first)) == 3


def test_parallel_calls_keep_their_order() -> None:
    names = [c.name for c in ADAPTER.parse_calls(PARTY)]
    assert names == ["power_disco_ball", "start_music", "dim_lights"]


def test_an_sdk_response_parses_like_its_rest_json() -> None:
    sdk = types.GenerateContentResponse.model_validate(PARTY)
    from_sdk = ADAPTER.parse_calls(sdk)
    from_dict = ADAPTER.parse_calls(PARTY)
    assert [(c.id, c.name, c.arguments) for c in from_sdk] == [
        (c.id, c.name, c.arguments) for c in from_dict
    ]


def test_an_sdk_response_built_in_python_parses() -> None:
    sdk = types.GenerateContentResponse(
        response_id="resp-sdk",
        candidates=[
            types.Candidate(
                content=types.Content(
                    role="model",
                    parts=[types.Part.from_function_call(name="shop__search", args={"q": None})],
                ),
                finish_reason=types.FinishReason.STOP,
            ),
        ],
    )
    [parsed] = ADAPTER.parse_calls(sdk)
    assert (parsed.name, parsed.arguments, parsed.defect) == ("shop.search", {"q": None}, None)


def test_snake_case_dicts_parse_like_camel_case_ones() -> None:
    snake = {
        "response_id": "resp-party",
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"function_call": p["functionCall"]} for p in _parts(PARTY)],
                },
                "finish_reason": "STOP",
            },
        ],
    }
    assert [c.id for c in ADAPTER.parse_calls(snake)] == [c.id for c in ADAPTER.parse_calls(PARTY)]


def _parts(payload: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = payload["candidates"][0]["content"]["parts"]
    return parts


def test_an_id_gemini_sent_is_kept_verbatim() -> None:
    payload = response(call("shop__search", {"query": "dune"}, id="fc-7 ÿ"), responseId="r")
    [parsed] = ADAPTER.parse_calls(payload)
    assert parsed.id == "fc-7 ÿ"


def test_the_turn_key_decides_the_ids_of_calls_without_one() -> None:
    turn_one = [c.id for c in ADAPTER.parse_calls(PARTY, turn=1)]
    turn_two = [c.id for c in ADAPTER.parse_calls(PARTY, turn=2)]
    by_response_id = [c.id for c in ADAPTER.parse_calls(PARTY)]
    assert turn_one == [c.id for c in ADAPTER.parse_calls(PARTY, turn=1)]
    assert not set(turn_one) & set(turn_two)
    assert not set(turn_one) & set(by_response_id)


def test_a_call_without_an_id_or_a_turn_key_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        ADAPTER.parse_calls(response(call("shop__search", {"query": "dune"})))


def test_a_call_without_args_has_empty_arguments() -> None:
    [parsed] = ADAPTER.parse_calls(response(call("clock__now"), responseId="r"))
    assert (parsed.name, parsed.arguments) == ("clock.now", {})


def test_a_response_without_candidates_has_no_calls() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r"}
    assert ADAPTER.parse_calls(blocked) == []
    assert ADAPTER.parse_calls(response(finish="STOP", responseId="r")) == []


@pytest.mark.parametrize("finish", ["STOP", None, "FINISH_REASON_UNSPECIFIED"])
def test_a_normal_finish_leaves_the_calls_runnable(finish: str | None) -> None:
    calls = ADAPTER.parse_calls(response(*_parts(PARTY), finish=finish, responseId="r"))
    assert [c.defect for c in calls] == [None, None, None]


@pytest.mark.parametrize(
    "finish",
    [
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "OTHER",
        "A_REASON_NOT_YET_INVENTED",
    ],
)
def test_any_other_finish_reason_marks_every_call_defective(finish: str) -> None:
    calls = ADAPTER.parse_calls(response(*_parts(PARTY), finish=finish, responseId="r"))
    assert len(calls) == 3
    assert all(c.defect for c in calls)


def test_calls_streamed_in_argument_fragments_are_defective() -> None:
    fragment = call("shop__search", None, partialArgs=[{"jsonPath": "$.query"}], willContinue=True)
    [parsed] = ADAPTER.parse_calls(response(fragment, responseId="r"))
    assert parsed.defect


@pytest.mark.parametrize("payload", ["not json", "[1, 2]", 42, b"\xff"])
def test_something_that_is_not_a_response_is_refused(payload: object) -> None:
    with pytest.raises(UntranslatableError):
        ADAPTER.parse_calls(payload)
    with pytest.raises(UntranslatableError):
        ADAPTER.stream(turn=1).feed(payload)


def test_definitions_of_another_provider_are_refused() -> None:
    other = Definitions(provider="anthropic", payload=[])
    with pytest.raises(ConfigurationError):
        ADAPTER.parse_calls(LIGHTS, definitions=other)
    with pytest.raises(ConfigurationError):
        ADAPTER.stream(definitions=other)


# --- streams -------------------------------------------------------------------------------


def chunks(finish: str | None = "STOP") -> list[dict[str, Any]]:
    """A `streamGenerateContent` answer: text, then whole calls, then the finish reason."""
    text = {"text": "Let me look."}
    first = call("shop__search", {"query": "dune"})
    second = call("shop__search", {"query": "dune"})
    out = [
        {"candidates": [{"content": {"role": "model", "parts": [text]}}], "responseId": "s1"},
        {"candidates": [{"content": {"role": "model", "parts": [first]}}], "responseId": "s1"},
        {"candidates": [{"content": {"role": "model", "parts": [second]}}], "responseId": "s1"},
    ]
    if finish is not None:
        out.append({"candidates": [{"finishReason": finish}], "responseId": "s1"})
    return out


def assemble(events: list[Any], **options: Any) -> list[ToolCall]:
    assembler = ADAPTER.stream(**options)
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def test_a_stream_assembles_whole_calls_in_order_with_the_ids_parse_calls_gives() -> None:
    streamed = assemble(chunks())
    whole = response(
        {"text": "Let me look."},
        call("shop__search", {"query": "dune"}),
        call("shop__search", {"query": "dune"}),
        responseId="s1",
    )
    parsed = ADAPTER.parse_calls(whole)
    assert [(c.id, c.name, c.arguments, c.defect) for c in streamed] == [
        (c.id, c.name, c.arguments, c.defect) for c in parsed
    ]
    assert streamed[0].id != streamed[1].id


def test_chunks_without_candidates_add_nothing_to_a_stream() -> None:
    usage = {"usageMetadata": {"totalTokenCount": 12}, "responseId": "s1"}
    assert [c.id for c in assemble([*chunks(), usage])] == [c.id for c in assemble(chunks())]


def test_a_stream_of_sdk_chunks_assembles_like_dict_chunks() -> None:
    sdk = [types.GenerateContentResponse.model_validate(c) for c in chunks()]
    assert [c.id for c in assemble(sdk)] == [c.id for c in assemble(chunks())]


def test_a_stream_of_json_text_chunks_assembles_like_dict_chunks() -> None:
    text = [json.dumps(c) for c in chunks()]
    assert [c.id for c in assemble(text, turn=4)] == [c.id for c in assemble(chunks(), turn=4)]


@pytest.mark.parametrize("finish", ["MAX_TOKENS", "SAFETY", "MALFORMED_FUNCTION_CALL", None])
def test_a_stream_that_does_not_stop_normally_yields_only_defective_calls(
    finish: str | None,
) -> None:
    calls = assemble(chunks(finish))
    assert len(calls) == 2
    assert all(c.defect for c in calls)


@pytest.mark.anyio
@pytest.mark.parametrize("finish", ["MAX_TOKENS", None])
async def test_a_cut_off_stream_is_refused_by_the_gate_and_never_runs(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
    finish: str | None,
) -> None:
    calls = assemble([types.GenerateContentResponse.model_validate(c) for c in chunks(finish)])
    envelopes = await gate.handle_batch(calls, principal)
    assert [e.error_type for e in envelopes] == [ErrorCode.INVALID_ARGUMENTS] * 2
    for streamed in calls:
        stages = [event.stage for event in audit.for_call(streamed.id)]
        assert "execute" not in stages


@pytest.mark.anyio
async def test_a_complete_stream_runs_through_the_gate(gate: Gate, principal: Principal) -> None:
    envelopes = await gate.handle_batch(assemble(chunks()), principal)
    assert [e.status for e in envelopes] == [Status.OK, Status.OK]


# --- results out ---------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.invariant(7)
async def test_results_go_back_as_one_user_content_in_call_order(
    gate: Gate,
    principal: Principal,
) -> None:
    calls = ADAPTER.parse_calls(
        response(
            call("shop__search", {"query": "dune"}),
            call("shop__nothing", {}),
            responseId="r",
        ),
    )
    envelopes = await gate.handle_batch(calls, principal)
    [content] = ADAPTER.render_results(calls, list(reversed(envelopes)))
    valid(types.Content, content)
    assert content["role"] == "user"
    first, second = (part["functionResponse"] for part in content["parts"])
    assert first["name"] == "shop__search"
    assert list(first["response"]) == ["output"]
    found = read_block(first["response"]["output"])
    assert found is not None
    assert json.loads(found.body) == envelopes[0].to_model_dict()
    assert second["name"] == "shop__nothing"
    assert list(second["response"]) == ["error"]
    refused = read_block(second["response"]["error"])
    assert refused is not None
    assert json.loads(refused.body) == envelopes[1].to_model_dict()
    assert json.loads(refused.body)["status"] == "error"
    assert found.boundary != refused.boundary
    assert "id" not in first
    assert "id" not in second


@pytest.mark.anyio
async def test_a_result_carries_the_id_gemini_gave_its_call(
    gate: Gate,
    principal: Principal,
) -> None:
    payload = response(call("shop__search", {"query": "dune"}, id="fc-1"), responseId="r")
    calls = ADAPTER.parse_calls(payload)
    [content] = ADAPTER.render_results(calls, await gate.handle_batch(calls, principal))
    assert content["parts"][0]["functionResponse"]["id"] == "fc-1"
    valid(types.Content, content)


def test_no_calls_means_no_result_content() -> None:
    assert ADAPTER.render_results([], []) == []


@pytest.mark.anyio
async def test_a_result_for_an_id_no_call_has_is_refused(gate: Gate, principal: Principal) -> None:
    calls = ADAPTER.parse_calls(LIGHTS)
    [envelope] = await gate.handle_batch(calls, principal)
    stranger = ToolCall(id="someone-else", name="shop.search", arguments={"query": "x"})
    [foreign] = await gate.handle_batch([stranger], principal)
    with pytest.raises(ConfigurationError):
        ADAPTER.render_results(calls, [envelope, foreign])
    with pytest.raises(ConfigurationError):
        ADAPTER.render_results(calls, [])


def test_calls_with_numbers_beyond_json_precision_still_get_stable_ids() -> None:
    payload = response(call("shop__search", {"n": 2**64, "s": "\ud800"}), responseId="r")
    first = ADAPTER.parse_calls(payload)
    assert [c.id for c in first] == [c.id for c in ADAPTER.parse_calls(payload)]
    assert first[0].id.startswith(ID_PREFIX)


def test_only_the_first_candidate_is_read() -> None:
    payload = response(call("a"), responseId="r")
    payload["candidates"][0]["index"] = 1
    assert ADAPTER.parse_calls(payload) == []


def test_definitions_of_this_adapter_are_accepted(registry: Registry) -> None:
    definitions = ADAPTER.tool_definitions([stock_spec(registry)])
    assert len(ADAPTER.parse_calls(LIGHTS, definitions=definitions)) == 1
