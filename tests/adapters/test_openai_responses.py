"""OpenAI Responses: definitions, tool choice, function_call items in (whole and streamed).

Fixtures follow the shapes of OpenAI's function-calling guide and API reference, and are
checked against the official SDK: responses and stream events with its models,
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
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseInputParam,
    ResponseStreamEvent,
    ToolChoiceFunctionParam,
    ToolChoiceOptions,
)
from pydantic import Field, TypeAdapter

from handrail import (
    Envelope,
    ErrorCode,
    ErrorDetail,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    tool,
)
from handrail.adapters.base import Definitions, IssueAction, ToolChoice, ToolChoiceMode
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError
from handrail.shaping.marking import read_block
from handrail.testing import MemoryAuditSink

STRICT = OpenAIResponsesAdapter(strict=True)
LOOSE = OpenAIResponsesAdapter(strict=False)
TOOL_PARAM = TypeAdapter(FunctionToolParam)
CHOICE_PARAM: TypeAdapter[Any] = TypeAdapter(ToolChoiceOptions | ToolChoiceFunctionParam)
INPUT_PARAM = TypeAdapter(ResponseInputParam)
EVENT = TypeAdapter(ResponseStreamEvent)


def response(
    *output: dict[str, Any],
    status: str = "completed",
    reason: str | None = None,
) -> dict[str, Any]:
    """A Response as the API reference shows one, with these output items."""
    return {
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": None if reason is None else {"reason": reason},
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4.1-2025-04-14",
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "metadata": {},
    }


def function_call(
    call_id: str,
    name: str,
    arguments: str,
    *,
    item_id: str = "fc_12345xyz",
    status: str = "completed",
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def assemble(
    events: list[dict[str, Any]],
    *,
    sdk: bool,
    definitions: Definitions | None = None,
) -> list[ToolCall]:
    assembler = STRICT.stream(definitions=definitions)
    for event in events:
        assembler.feed(EVENT.validate_python(event) if sdk else event)
    return assembler.finish()


class Events:
    """Numbers stream events as the API does, one sequence number each."""

    def __init__(self) -> None:
        self.numbers = itertools.count(1)

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(self.numbers), **fields}

    def added(self, index: int, call_id: str, name: str) -> dict[str, Any]:
        item = function_call(call_id, name, "", item_id=f"fc_{index}", status="in_progress")
        return self.event("response.output_item.added", output_index=index, item=item)

    def delta(self, index: int, text: str) -> dict[str, Any]:
        return self.event(
            "response.function_call_arguments.delta",
            item_id=f"fc_{index}",
            output_index=index,
            delta=text,
        )

    def arguments_done(self, index: int, text: str) -> dict[str, Any]:
        return self.event(
            "response.function_call_arguments.done",
            item_id=f"fc_{index}",
            output_index=index,
            arguments=text,
        )

    def item_done(self, index: int, call_id: str, name: str, text: str) -> dict[str, Any]:
        item = function_call(call_id, name, text, item_id=f"fc_{index}")
        return self.event("response.output_item.done", output_index=index, item=item)

    def completed(self, *output: dict[str, Any]) -> dict[str, Any]:
        return self.event("response.completed", response=response(*output))

    def incomplete(self, *output: dict[str, Any]) -> dict[str, Any]:
        body = response(*output, status="incomplete", reason="max_output_tokens")
        return self.event("response.incomplete", response=body)


# --- definitions and tool choice ------------------------------------------------------------


@pytest.mark.parametrize("adapter", [STRICT, LOOSE], ids=["strict", "loose"])
def test_definitions_match_the_sdk_tool_param_and_always_say_their_mode(
    registry: Registry,
    principal: Principal,
    adapter: OpenAIResponsesAdapter,
) -> None:
    definitions = adapter.tool_definitions(registry.exposed(principal))
    assert definitions.provider == "openai-responses"
    for definition in definitions.payload:
        TOOL_PARAM.validate_python(definition, strict=True)
        assert definition["strict"] is adapter.strict
    assert [d["name"] for d in definitions.payload] == ["shop__search", "shop__stock"]


def test_strict_definitions_report_rewrites_and_restore_only_what_needs_it(
    registry: Registry,
    principal: Principal,
) -> None:
    definitions = STRICT.tool_definitions(registry.exposed(principal))
    assert all(issue.action is IssueAction.REWRITTEN for issue in definitions.issues)
    assert set(definitions.restore) == {"shop.search"}


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice(), "auto"),
        (ToolChoice(mode=ToolChoiceMode.NONE), "none"),
        (ToolChoice(mode=ToolChoiceMode.REQUIRED), "required"),
        (ToolChoice.forced("shop.stock"), {"type": "function", "name": "shop__stock"}),
    ],
)
def test_tool_choice_maps_to_the_responses_field(choice: ToolChoice, wire: object) -> None:
    assert STRICT.tool_choice(choice) == wire
    CHOICE_PARAM.validate_python(wire, strict=True)


# --- calls in ------------------------------------------------------------------------------

GUIDE_ITEM = function_call("call_12345xyz", "shop__search", '{"query":"Paris, France"}')


@pytest.mark.parametrize("form", ["sdk", "dict", "json", "output"])
def test_a_response_parses_in_every_accepted_form_keeping_call_id_verbatim(form: str) -> None:
    document = response(GUIDE_ITEM)
    given_as: object = {
        "sdk": Response.model_validate(document),
        "dict": document,
        "json": json.dumps(document),
        "output": Response.model_validate(document).output,
    }[form]
    [call] = STRICT.parse_calls(given_as)
    assert (call.id, call.name, call.arguments, call.defect) == (
        "call_12345xyz",
        "shop.search",
        '{"query":"Paris, France"}',
        None,
    )
    assert call.provider == "openai-responses"


def test_only_function_call_items_are_calls_and_raw_is_the_item() -> None:
    message = {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
    }
    parsed = Response.model_validate(response(message, GUIDE_ITEM))
    [call] = STRICT.parse_calls(parsed)
    assert call.raw is parsed.output[1]


def test_calls_of_an_incomplete_response_are_defective_unless_the_item_completed() -> None:
    document = response(
        function_call("call_1", "shop__search", '{"query": "a"}', item_id="fc_1"),
        function_call(
            "call_2", "shop__search", '{"query": "b', item_id="fc_2", status="incomplete"
        ),
        status="incomplete",
        reason="max_output_tokens",
    )
    calls = STRICT.parse_calls(Response.model_validate(document))
    assert [call.defect for call in calls] == [
        None,
        "the arguments were truncated: status=incomplete, reason=max_output_tokens",
    ]


@pytest.mark.parametrize("status", ["failed", "cancelled", "in_progress"])
def test_every_call_of_a_response_that_did_not_finish_is_defective(status: str) -> None:
    [call] = STRICT.parse_calls(response(GUIDE_ITEM, status=status))
    assert call.defect == f"the response did not complete: status={status}"


def test_strict_nulls_are_dropped_when_definitions_are_given(registry: Registry) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    item = function_call("c", "shop__search", '{"query":"x","limit":null,"filters":null}')
    [call] = STRICT.parse_calls(response(item), definitions=definitions)
    assert call.arguments == {"query": "x", "filters": None}


def test_chat_definitions_cannot_parse_responses_calls(registry: Registry) -> None:
    other = OpenAIChatAdapter(strict=False).tool_definitions([registry.get("shop.stock").spec])
    with pytest.raises(ConfigurationError):
        STRICT.parse_calls(response(GUIDE_ITEM), definitions=other)


# --- streams -------------------------------------------------------------------------------

ARGUMENTS = '{"query": "Par\\"is", "limit": 2}'


def guide_stream(cut: int, *, with_done: bool = True) -> list[dict[str, Any]]:
    """The guide's event sequence for one call, its arguments split at `cut`."""
    e = Events()
    events = [
        e.added(0, "call_1", "shop__search"),
        e.delta(0, ARGUMENTS[:cut]),
        e.delta(0, ARGUMENTS[cut:]),
    ]
    if with_done:
        events += [
            e.arguments_done(0, ARGUMENTS),
            e.item_done(0, "call_1", "shop__search", ARGUMENTS),
            e.completed(function_call("call_1", "shop__search", ARGUMENTS, item_id="fc_0")),
        ]
    return events


@pytest.mark.parametrize("sdk", [False, True], ids=["dicts", "sdk"])
@pytest.mark.parametrize("cut", range(len(ARGUMENTS) + 1))
def test_arguments_split_at_any_position_assemble_to_the_same_text(cut: int, sdk: bool) -> None:
    [call] = assemble(guide_stream(cut), sdk=sdk)
    assert (call.id, call.name, call.arguments, call.defect) == (
        "call_1",
        "shop.search",
        ARGUMENTS,
        None,
    )


def test_the_done_event_is_the_source_of_truth_over_the_deltas() -> None:
    e = Events()
    events = [
        e.added(0, "call_1", "shop__search"),
        e.delta(0, '{"query": "x"}'),
        e.arguments_done(0, '{"query": "x"}'),
        e.item_done(0, "call_1", "shop__search", '{"query": "x"}'),
        e.completed(),
    ]
    [call] = assemble(events, sdk=True)
    assert call.arguments == '{"query": "x"}'


def test_a_replayed_event_is_not_added_twice() -> None:
    e = Events()
    first = e.delta(0, '{"query": ')
    events = [e.added(0, "call_1", "shop__search"), first, first, e.delta(0, '"x"}')]
    events.append(e.completed())
    [call] = assemble(events, sdk=True)
    # Without done events the deltas are all there is: each counted once.
    assert call.arguments == '{"query": "x"}'


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """Three parallel calls whose events interleave, each call's own order kept."""
    calls = [
        ("call_a", "shop__search", '{"query": "dune"}'),
        ("call_b", "shop__stock", '{"book_id": "b1"}'),
        ("call_c", "shop__search", '{"query": "emma", "limit": 2}'),
    ]
    with_done = draw(st.booleans())
    e = Events()
    queues: list[list[tuple[str, Any]]] = []
    for index, (call_id, name, text) in enumerate(calls):
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
        bounds = [0, *cuts, len(text)]
        queue: list[tuple[str, Any]] = [("added", (index, call_id, name))]
        queue += [("delta", (index, text[a:b])) for a, b in itertools.pairwise(bounds)]
        if with_done:
            queue += [("args", (index, text)), ("item", (index, call_id, name, text))]
        queues.append(queue)
    makers: dict[str, Callable[..., dict[str, Any]]] = {
        "added": e.added,
        "delta": e.delta,
        "args": e.arguments_done,
        "item": e.item_done,
    }
    events = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        kind, args = queue.pop(0)
        events.append(makers[kind](*args))
    events.append(e.completed())
    return events, calls


@given(interleavings(), st.booleans())
def test_interleaved_parallel_calls_assemble_by_item(
    case: tuple[list[dict[str, Any]], list[tuple[str, str, str]]],
    sdk: bool,
) -> None:
    events, expected = case
    calls = assemble(events, sdk=sdk)
    assert [(c.id, c.name.replace(".", "__"), c.arguments) for c in calls] == expected


def test_a_stream_cut_before_the_done_events_gives_defective_calls() -> None:
    [call] = assemble(guide_stream(5, with_done=False), sdk=True)
    assert call.defect == "the stream ended before the call was complete"


def test_an_incomplete_response_marks_unfinished_calls_and_keeps_finished_ones() -> None:
    e = Events()
    events = [
        e.added(0, "call_1", "shop__search"),
        e.delta(0, '{"query": "a"}'),
        e.arguments_done(0, '{"query": "a"}'),
        e.item_done(0, "call_1", "shop__search", '{"query": "a"}'),
        e.added(1, "call_2", "shop__search"),
        e.delta(1, '{"query": "b'),
        e.incomplete(),
    ]
    calls = assemble(events, sdk=True)
    assert [call.defect for call in calls] == [
        None,
        "the arguments were truncated: status=incomplete, reason=max_output_tokens",
    ]


def test_a_streamed_call_is_restored_with_its_definitions(registry: Registry) -> None:
    definitions = STRICT.tool_definitions([registry.get("shop.search").spec])
    e = Events()
    text = '{"query":"x","limit":null,"filters":null}'
    events = [
        e.added(0, "call_1", "shop__search"),
        e.arguments_done(0, text),
        e.item_done(0, "call_1", "shop__search", text),
        e.completed(),
    ]
    [call] = assemble(events, sdk=True, definitions=definitions)
    assert call.arguments == {"query": "x", "filters": None}


# --- through the gate ----------------------------------------------------------------------


@pytest.fixture
def ran(registry: Registry) -> list[str]:
    """Registers `probe.echo`; the list records every run."""
    runs: list[str] = []

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe")
    def echo(note: Annotated[str, Field(max_length=100)] = "") -> str:
        """Echo the note."""
        runs.append(note)
        return note

    registry.register(echo)
    return runs


@pytest.mark.invariant(2)
def test_a_cut_off_streamed_call_is_refused_by_the_gate_and_never_runs(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
    ran: list[str],
) -> None:
    e = Events()
    events = [e.added(0, "call_cut", "probe__echo"), e.delta(0, '{"note": "hi"}'), e.incomplete()]
    [call] = assemble(events, sdk=True)
    envelope = gate.handle_sync(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert ran == []
    assert all(event.stage != "execute" for event in audit.for_call("call_cut"))


# --- results out ---------------------------------------------------------------------------


@pytest.mark.invariant(7)
def test_results_become_function_call_output_items_in_call_order() -> None:
    calls = STRICT.parse_calls(
        response(
            function_call("call_1", "shop__search", "{}", item_id="fc_1"),
            function_call("call_2", "shop__stock", "{}", item_id="fc_2"),
        ),
    )
    envelopes = [
        Envelope(
            call_id="call_2",
            tool="shop.stock",
            status=Status.ERROR,
            summary="No.",
            error=ErrorDetail(code=ErrorCode.NOT_FOUND),
        ),
        Envelope(call_id="call_1", tool="shop.search", status=Status.EMPTY, summary="None."),
    ]
    items = STRICT.render_results(calls, envelopes)
    assert [(i["type"], i["call_id"]) for i in items] == [
        ("function_call_output", "call_1"),
        ("function_call_output", "call_2"),
    ]
    blocks = [read_block(item["output"]) for item in items]
    assert [json.loads(b.body)["status"] for b in blocks if b is not None] == ["empty", "error"]
    INPUT_PARAM.validate_python(items)


def test_a_result_for_an_unknown_id_is_a_configuration_error() -> None:
    calls = STRICT.parse_calls(response(GUIDE_ITEM))
    stray = Envelope(call_id="nope", tool="shop.search", status=Status.OK, summary="x")
    with pytest.raises(ConfigurationError):
        STRICT.render_results(calls, [stray])
