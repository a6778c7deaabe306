"""OpenAI Chat Completions: definitions, tool choice, calls in (whole and streamed), results.

Fixtures follow the shapes of OpenAI's function-calling guide and API reference, and are
checked against the official SDK: responses with its models' `model_validate`,
everything Handrail sends with a pydantic TypeAdapter over its TypedDict params.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessage,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
)
from pydantic import Field, TypeAdapter

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    ToolCall,
    tool,
)
from handrail.adapters.base import Definitions, IssueAction, ToolChoice, ToolChoiceMode
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.envelope import ErrorDetail
from handrail.errors import ConfigurationError
from handrail.shaping.marking import read_block
from handrail.testing import MemoryAuditSink

STRICT = OpenAIChatAdapter(strict=True)
LOOSE = OpenAIChatAdapter(strict=False)
TOOL_PARAM = TypeAdapter(ChatCompletionFunctionToolParam)
CHOICE_PARAM: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolChoiceOptionParam)
TOOL_MESSAGE = TypeAdapter(ChatCompletionToolMessageParam)


def completion(*calls: dict[str, Any], finish_reason: str = "tool_calls") -> dict[str, Any]:
    """A chat completion as the API reference shows one, with these tool calls."""
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1699896916,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": list(calls)},
                "logprobs": None,
                "finish_reason": finish_reason,
            },
        ],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def chunk(
    *fragments: dict[str, Any],
    finish_reason: str | None = None,
    content: str | None = None,
) -> dict[str, Any]:
    """A ChatCompletionChunk as the streaming guide shows one."""
    delta: dict[str, Any] = {"content": content}
    if fragments:
        delta["tool_calls"] = list(fragments)
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason},
        ],
    }


def opening(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def piece(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "id": None, "type": None, "function": {"arguments": text, "name": None}}


def assemble(
    events: list[dict[str, Any]],
    *,
    sdk: bool,
    definitions: Definitions | None = None,
) -> list[ToolCall]:
    assembler = STRICT.stream(definitions=definitions)
    for event in events:
        assembler.feed(ChatCompletionChunk.model_validate(event) if sdk else event)
    return assembler.finish()


# --- definitions and tool choice ------------------------------------------------------------


@pytest.mark.parametrize("adapter", [STRICT, LOOSE], ids=["strict", "loose"])
def test_definitions_match_the_sdk_tool_param_and_say_their_mode(
    registry: Registry,
    principal: Principal,
    adapter: OpenAIChatAdapter,
) -> None:
    definitions = adapter.tool_definitions(registry.exposed(principal))
    assert definitions.provider == "openai-chat"
    for definition in definitions.payload:
        TOOL_PARAM.validate_python(definition, strict=True)
        assert definition["function"]["strict"] is adapter.strict
    assert [d["function"]["name"] for d in definitions.payload] == ["shop__search", "shop__stock"]


def test_strict_definitions_report_each_rewrite_and_keep_a_restorer_per_tool(
    registry: Registry,
    principal: Principal,
) -> None:
    definitions = STRICT.tool_definitions(registry.exposed(principal))
    assert {issue.tool for issue in definitions.issues} == {"shop.search", "shop.stock"}
    assert all(issue.action is IssueAction.REWRITTEN for issue in definitions.issues)
    assert set(definitions.restore) == {"shop.search"}


def test_loose_definitions_send_the_spec_schema_as_it_is(registry: Registry) -> None:
    spec = registry.get("shop.search").spec
    [definition] = LOOSE.tool_definitions([spec]).payload
    assert definition["function"]["parameters"] == dict(spec.input_schema)


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice(), "auto"),
        (ToolChoice(mode=ToolChoiceMode.NONE), "none"),
        (ToolChoice(mode=ToolChoiceMode.REQUIRED), "required"),
        (
            ToolChoice.forced("shop.search"),
            {"type": "function", "function": {"name": "shop__search"}},
        ),
    ],
)
def test_tool_choice_maps_to_the_chat_field(choice: ToolChoice, wire: object) -> None:
    assert STRICT.tool_choice(choice) == wire
    CHOICE_PARAM.validate_python(wire, strict=True)


def test_forcing_a_tool_whose_name_cannot_map_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        STRICT.tool_choice(ToolChoice.forced("shop.get__book"))


# --- calls in ------------------------------------------------------------------------------

GUIDE_CALL = function_call("call_abc123", "shop__search", '{\n"query": "dune"\n}')


@pytest.mark.parametrize("form", ["sdk", "dict", "json", "bytes", "choice", "message"])
def test_a_completion_parses_in_every_accepted_form_with_ids_and_arguments_verbatim(
    form: str,
) -> None:
    document = completion(GUIDE_CALL)
    given_as: object = {
        "sdk": ChatCompletion.model_validate(document),
        "dict": document,
        "json": json.dumps(document),
        "bytes": json.dumps(document).encode(),
        "choice": document["choices"][0],
        "message": ChatCompletionMessage.model_validate(document["choices"][0]["message"]),
    }[form]
    [call] = STRICT.parse_calls(given_as)
    assert (call.id, call.name, call.arguments) == (
        "call_abc123",
        "shop.search",
        '{\n"query": "dune"\n}',
    )
    assert call.provider == "openai-chat"
    assert call.defect is None
    assert call.raw is not None


def test_raw_is_the_original_tool_call_item() -> None:
    parsed = ChatCompletion.model_validate(completion(GUIDE_CALL))
    [call] = STRICT.parse_calls(parsed)
    assert call.raw is parsed.choices[0].message.tool_calls[0]  # type: ignore[index]


def test_a_completion_without_tool_calls_has_none() -> None:
    document = completion(finish_reason="stop")
    document["choices"][0]["message"] = {"role": "assistant", "content": "Hello!"}
    assert STRICT.parse_calls(ChatCompletion.model_validate(document)) == []
    assert STRICT.parse_calls({**document, "choices": []}) == []


def test_parallel_calls_keep_their_order_and_ids() -> None:
    document = completion(
        function_call("call_2", "shop__stock", '{"book_id":"b1"}'),
        function_call("call_1", "shop__search", '{"query":"x"}'),
    )
    assert [(c.id, c.name) for c in STRICT.parse_calls(document)] == [
        ("call_2", "shop.stock"),
        ("call_1", "shop.search"),
    ]


@pytest.mark.parametrize("reason", ["length", "content_filter"])
def test_calls_of_a_cut_off_completion_are_defective(reason: str) -> None:
    document = completion(
        function_call("call_1", "shop__search", '{"query": "du'), finish_reason=reason
    )
    [call] = STRICT.parse_calls(ChatCompletion.model_validate(document))
    assert call.defect == f"the arguments were truncated: finish_reason={reason}"


def test_strict_nulls_for_optional_fields_are_dropped_when_definitions_are_given(
    registry: Registry,
) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    sent = '{"query":"dune","limit":null,"filters":null}'
    [call] = STRICT.parse_calls(
        completion(function_call("c", "shop__search", sent)),
        definitions=definitions,
    )
    assert call.arguments == {"query": "dune", "filters": None}
    [untouched] = STRICT.parse_calls(completion(function_call("c", "shop__search", sent)))
    assert untouched.arguments == sent


def test_arguments_without_nulls_to_drop_stay_verbatim_text(registry: Registry) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    sent = '{"query": "dune", "limit": 3, "filters": null}'
    [call] = STRICT.parse_calls(
        completion(function_call("c", "shop__search", sent)),
        definitions=definitions,
    )
    assert call.arguments == sent


def test_arguments_the_gate_must_refuse_are_not_restored(registry: Registry) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    sent = '{"query": "a", "query": "b", "limit": null}'
    [call] = STRICT.parse_calls(
        completion(function_call("c", "shop__search", sent)),
        definitions=definitions,
    )
    assert call.arguments == sent


def test_definitions_of_another_format_are_refused(registry: Registry) -> None:
    other = OpenAIResponsesAdapter(strict=True).tool_definitions([registry.get("shop.stock").spec])
    with pytest.raises(ConfigurationError):
        STRICT.parse_calls(completion(GUIDE_CALL), definitions=other)


def test_response_text_that_is_not_json_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        STRICT.parse_calls("{not json")


def test_a_custom_tool_call_is_kept_but_defective() -> None:
    custom = {"id": "call_c", "type": "custom", "custom": {"name": "shop__search", "input": "x"}}
    [call] = STRICT.parse_calls(ChatCompletion.model_validate(completion(custom)))
    assert call.id == "call_c"
    assert call.defect is not None


# --- streams -------------------------------------------------------------------------------

ARGUMENTS = '{"query": "dün\\"e", "limit": 3}'


@pytest.mark.parametrize("sdk", [False, True], ids=["dicts", "sdk"])
@pytest.mark.parametrize("cut", range(len(ARGUMENTS) + 1))
def test_arguments_split_at_any_position_assemble_to_the_same_text(cut: int, sdk: bool) -> None:
    events = [
        chunk(opening(0, "call_1", "shop__search")),
        chunk(piece(0, ARGUMENTS[:cut])),
        chunk(piece(0, ARGUMENTS[cut:])),
        chunk(finish_reason="tool_calls"),
    ]
    [call] = assemble(events, sdk=sdk)
    assert (call.id, call.name, call.arguments, call.defect) == (
        "call_1",
        "shop.search",
        ARGUMENTS,
        None,
    )


def test_arguments_one_character_per_chunk_assemble_once() -> None:
    events = [chunk(opening(0, "call_1", "shop__search"))]
    events += [chunk(piece(0, ch)) for ch in ARGUMENTS]
    events.append(chunk(finish_reason="tool_calls"))
    [call] = assemble(events, sdk=True)
    assert call.arguments == ARGUMENTS


PARALLEL = {
    0: ("call_a", "shop__search", '{"query": "dune"}'),
    1: ("call_b", "shop__stock", '{"book_id": "b1"}'),
    2: ("call_c", "shop__search", '{"query": "emma", "limit": 2}'),
}


@st.composite
def interleavings(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Each call opened first, its pieces in order, calls' chunks interleaved at random."""
    queues: list[list[dict[str, Any]]] = []
    for index, (call_id, name, text) in PARALLEL.items():
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
        bounds = [0, *cuts, len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        queues.append([opening(index, call_id, name), *(piece(index, p) for p in pieces)])
    events: list[dict[str, Any]] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        events.append(chunk(queue.pop(0)))
    return [*events, chunk(finish_reason="tool_calls")]


@given(interleavings(), st.booleans())
def test_interleaved_parallel_calls_assemble_by_index(
    events: list[dict[str, Any]],
    sdk: bool,
) -> None:
    calls = assemble(events, sdk=sdk)
    assert [(c.id, c.name.replace(".", "__"), c.arguments) for c in calls] == list(
        PARALLEL.values(),
    )
    assert all(call.defect is None for call in calls)


@pytest.mark.parametrize(
    ("last", "defect"),
    [
        (chunk(finish_reason="length"), "the arguments were truncated: finish_reason=length"),
        (chunk(), "the stream ended without a finish reason; the call may be cut off"),
    ],
)
def test_a_truncated_stream_gives_defective_calls(last: dict[str, Any], defect: str) -> None:
    events = [
        chunk(opening(0, "call_1", "shop__search"), opening(1, "call_2", "shop__stock")),
        chunk(piece(0, '{"query": "dune"}'), piece(1, '{"book_')),
        last,
    ]
    calls = assemble(events, sdk=True)
    assert [call.defect for call in calls] == [defect, defect]


def test_arguments_that_never_close_are_incomplete_json_even_after_a_clean_finish() -> None:
    events = [
        chunk(opening(0, "call_1", "shop__search")),
        chunk(piece(0, '{"query": "du')),
        chunk(finish_reason="tool_calls"),
    ]
    [call] = assemble(events, sdk=False)
    assert call.defect == "the streamed arguments are incomplete JSON"


def test_a_stream_applies_the_strict_restore_when_the_call_is_complete(registry: Registry) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    events = [
        chunk(opening(0, "call_1", "shop__search")),
        chunk(piece(0, '{"query":"dune","limit":null,"filters":null}')),
        chunk(finish_reason="tool_calls"),
    ]
    [call] = assemble(events, sdk=True, definitions=definitions)
    assert call.arguments == {"query": "dune", "filters": None}


def test_text_only_chunks_and_other_choices_add_no_calls() -> None:
    other = chunk(opening(0, "call_x", "shop__search"))
    other["choices"][0]["index"] = 1
    events = [chunk(content="Hel"), chunk(content="lo"), other, chunk(finish_reason="stop")]
    assert assemble(events, sdk=True) == []


# --- through the gate ----------------------------------------------------------------------


@pytest.fixture
def ran(registry: Registry) -> list[dict[str, object]]:
    """Registers `probe.echo`; the list records every run."""
    runs: list[dict[str, object]] = []

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe")
    def echo(note: Annotated[str, Field(max_length=100)] = "") -> str:
        """Echo the note."""
        runs.append({"note": note})
        return note

    registry.register(echo)
    return runs


@pytest.mark.invariant(2)
def test_a_cut_off_streamed_call_is_refused_by_the_gate_and_never_runs(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
    ran: list[dict[str, object]],
) -> None:
    events = [
        chunk(opening(0, "call_cut", "probe__echo")),
        chunk(piece(0, '{"note": "hello"}')),
        chunk(finish_reason="length"),
    ]
    [call] = assemble(events, sdk=True)
    envelope = gate.handle_sync(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert ran == []
    assert all(event.stage != "execute" for event in audit.for_call("call_cut"))


def test_a_complete_streamed_call_runs_through_the_gate(
    gate: Gate,
    principal: Principal,
    ran: list[dict[str, object]],
) -> None:
    events = [
        chunk(opening(0, "call_ok", "probe__echo")),
        chunk(piece(0, '{"note": ')),
        chunk(piece(0, '"hello"}')),
        chunk(finish_reason="tool_calls"),
    ]
    [call] = assemble(events, sdk=True)
    assert gate.handle_sync(call, principal).status is Status.OK
    assert ran == [{"note": "hello"}]


# --- results out ---------------------------------------------------------------------------


def envelope_for(call: ToolCall, *, error: bool = False) -> Envelope:
    if error:
        return Envelope(
            call_id=call.id,
            tool=call.name,
            status=Status.ERROR,
            summary="No.",
            error=ErrorDetail(code=ErrorCode.NOT_FOUND),
        )
    return Envelope(call_id=call.id, tool=call.name, status=Status.OK, summary="Yes.", data=1)


@pytest.mark.invariant(7)
def test_results_become_tool_messages_in_call_order_matched_by_id() -> None:
    calls = STRICT.parse_calls(
        completion(
            function_call("call_1", "shop__search", "{}"),
            function_call("call_2", "shop__stock", "{}"),
        ),
    )
    envelopes = [envelope_for(calls[1], error=True), envelope_for(calls[0])]
    messages = STRICT.render_results(calls, envelopes)
    assert [m["tool_call_id"] for m in messages] == ["call_1", "call_2"]
    block = read_block(messages[1]["content"])
    assert block is not None
    assert json.loads(block.body)["error_type"] == "NOT_FOUND"
    for message in messages:
        TOOL_MESSAGE.validate_python(message, strict=True)


@pytest.mark.parametrize(
    "mistake",
    [
        lambda calls: [envelope_for(calls[0])],
        lambda calls: (
            [envelope_for(c) for c in calls]
            + [envelope_for(ToolCall(id="ghost", name="x", arguments=None))]
        ),
    ],
    ids=["missing", "unknown"],
)
def test_results_that_do_not_pair_with_the_calls_are_a_configuration_error(
    mistake: Callable[[list[ToolCall]], list[Envelope]],
) -> None:
    calls = STRICT.parse_calls(
        completion(function_call("call_1", "a", "{}"), function_call("call_2", "b", "{}")),
    )
    with pytest.raises(ConfigurationError):
        STRICT.render_results(calls, mistake(calls))
