"""OpenAI Responses wire format, both ways: `OpenAIResponsesAdapter`.

Tool definitions (strict mode or not) and tool choice out; `function_call` output
items in, from whole responses and from streamed events; `function_call_output`
items and whole transcripts as input items back. `call_id` is the id kept verbatim.
It never decides exposure or policy, and never imports the `openai` SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from handrail.adapters import _openai
from handrail.adapters._ids import id_from_wire, id_to_wire
from handrail.adapters._names import name_from_wire, name_to_wire, to_wire_name
from handrail.adapters._openai import field as read
from handrail.adapters._openai import listed
from handrail.adapters.base import Definitions, StreamAssembler, ToolChoice, ToolChoiceMode
from handrail.adapters.base import UntranslatableError as Untranslatable
from handrail.adapters.rendering import TranscriptRenderer
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
    pair_results,
)
from handrail.calls import ToolCall
from handrail.envelope import Envelope
from handrail.shaping.marking import DataMarker
from handrail.spec import ToolSpec

if TYPE_CHECKING:
    from handrail.adapters.base import Adapter

__all__ = ["PROVIDER", "OpenAIResponsesAdapter", "tool_definitions"]

PROVIDER = "openai-responses"

# Input items that carry nothing the neutral transcript holds.
_SKIPPED_ITEMS = frozenset({"reasoning"})
_SKIPPED_ROLES = frozenset({"system", "developer"})


def _shape(spec: ToolSpec, wire: str, schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": wire,
        "description": spec.model_description,
        "parameters": schema,
        "strict": strict,
    }


def _status_defect(status: object, reason: object) -> str | None:
    """Why calls of a response with this status may be cut off; None when complete."""
    # Tuples, not sets: a status that is not text (a model's dict) must not raise here.
    if status in (None, "completed"):
        return None
    if status == "incomplete":
        return f"the arguments were truncated: status=incomplete, reason={reason}"
    return f"the response did not complete: status={status}"


def _finished(status: object, item: object) -> bool:
    """An item the response completed, even if the response as a whole did not."""
    return status == "incomplete" and read(item, "status") == "completed"


class OpenAIResponsesAdapter:
    """Responses (`/v1/responses`), with or without strict function calling.

    `strict` has no default, for the reasons given on OpenAIChatAdapter. It is always
    sent explicitly: the Responses API takes an absent `strict` as true. `marker` wraps
    each result in its data block; a fresh `DataMarker` by default.
    """

    __slots__ = ("_marker", "_strict")

    provider = PROVIDER

    def __init__(self, *, strict: bool, marker: DataMarker | None = None) -> None:
        self._strict = strict
        self._marker = marker if marker is not None else DataMarker()

    @property
    def strict(self) -> bool:
        """Whether definitions are sent with `strict: true`."""
        return self._strict

    def tool_definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """`{"type": "function", "name", "description", "parameters", "strict"}` per spec.

        Raises UnsupportedSchemaError in strict mode for a schema it cannot take.
        """
        return _openai.build_definitions(PROVIDER, specs, strict=self._strict, shape=_shape)

    def tool_choice(self, choice: ToolChoice) -> object:
        """`"auto"`, `"none"`, `"required"` or `{"type": "function", "name"}`."""
        match choice.mode:
            case ToolChoiceMode.AUTO | ToolChoiceMode.NONE | ToolChoiceMode.REQUIRED:
                return choice.mode.value
            case ToolChoiceMode.TOOL:
                return {"type": "function", "name": to_wire_name(str(choice.tool))}
            case _:  # pragma: no cover - closed by the enum
                assert_never(choice.mode)

    def parse_calls(
        self,
        response: object,
        *,
        definitions: Definitions | None = None,
    ) -> list[ToolCall]:
        """The `function_call` items of a Response's `output`, in order.

        Takes a Response (SDK object, dict or JSON text) or its `output` list. In a
        response that did not complete (status `incomplete`, for instance with reason
        `max_output_tokens`), a call is defective unless its own item says `completed`;
        in a failed or cancelled one every call is.
        """
        restore = _openai.restorers(PROVIDER, definitions)
        document = _openai.load(response)
        status: object = None
        cut: str | None = None
        if isinstance(document, list | tuple):
            items = list(document)
        else:
            status = read(document, "status")
            cut = _status_defect(status, read(read(document, "incomplete_details"), "reason"))
            items = listed(read(document, "output"))
        return [
            _openai.make_call(
                provider=PROVIDER,
                call_id=read(item, "call_id"),
                name=read(item, "name"),
                arguments=read(item, "arguments"),
                raw=item,
                defect=None if _finished(status, item) else cut,
                restore=restore,
            )
            for item in items
            if read(item, "type") == "function_call"
        ]

    def stream(self, *, definitions: Definitions | None = None) -> StreamAssembler:
        """An assembler for one streamed response, fed its events in stream order.

        It takes the events of `responses.create(stream=True)` or of the SDK's
        `responses.stream()` helper (SDK objects or dicts); anything else fed in
        raises UntranslatableError.
        """
        return _ResponsesStream(restore=_openai.restorers(PROVIDER, definitions))

    def render_results(
        self,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[dict[str, Any]]:
        """One `{"type": "function_call_output", "call_id", "output"}` item per call.

        In call order, the output the envelope's data block; raises ConfigurationError
        for an envelope no call asked for, or a call left without one (`pair_results`).
        """
        turn = pair_results(calls, envelopes, marker=self._marker)
        return [_output_item(result) for result in turn.results]

    def to_wire(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """Input items: messages, `function_call` and `function_call_output` items.

        Raises UntranslatableError for what would not read back unchanged
        (`_openai.check_transcript`); here also an assistant turn without text right
        after another assistant turn, which would read back merged into it.
        """
        state = _ResponsesWire()
        state.extend(transcript)
        return state.wire()

    def renderer(self, *, conversations: int = 16) -> TranscriptRenderer:
        """A renderer that gives what `to_wire` gives, rendering each new turn only once."""
        return TranscriptRenderer(_ResponsesWire, conversations=conversations)

    def from_wire(self, messages: Sequence[object]) -> list[Turn]:
        """Neutral turns from input or output items (dicts or SDK objects).

        An assistant message and the `function_call` items after it form one assistant
        turn; consecutive `function_call_output` items one results turn, each output's
        tool named by the earlier call with its `call_id` and `is_error` read from its
        envelope's status. System and developer messages and reasoning items are not
        tool-relevant and are skipped. Raises UntranslatableError for other item types,
        non-text content, and an output for an id no earlier call had.
        """
        return _Reader().read(messages)


class _ResponsesWire:
    """A transcript's input items so far (`rendering.WireState`)."""

    __slots__ = ("_check", "_items")

    def __init__(self) -> None:
        self._check = _openai.TranscriptCheck(merges_assistant_turns=True)
        self._items: list[dict[str, Any]] = []

    def extend(self, turns: Sequence[Turn]) -> None:
        # Every new turn is checked before any is rendered, as for a whole transcript.
        self._check.extend(turns)
        items = self._items
        for turn in turns:
            if isinstance(turn, UserTurn):
                items.append({"type": "message", "role": "user", "content": turn.text})
            elif isinstance(turn, AssistantTurn):
                if turn.text is not None:
                    items.append({"type": "message", "role": "assistant", "content": turn.text})
                items.extend(
                    {
                        "type": "function_call",
                        "call_id": id_to_wire(call.id),
                        "name": name_to_wire(call.name),
                        "arguments": _openai.arguments_text(call.arguments),
                    }
                    for call in turn.calls
                )
            elif isinstance(turn, ToolResultsTurn):
                items.extend(_output_item(result) for result in turn.results)
            else:  # pragma: no cover - closed by the Turn union
                assert_never(turn)

    def wire(self) -> list[dict[str, Any]]:
        return list(self._items)


def _output_item(result: ToolResult) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "call_id": id_to_wire(result.call_id),
        "output": result.content,
    }


@dataclass(slots=True)
class _Reader:
    """Groups input items into neutral turns, in one pass."""

    turns: list[Turn] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    open_assistant: bool = False

    def read(self, items: Sequence[object]) -> list[Turn]:
        for item in items:
            kind = read(item, "type")
            role = read(item, "role")
            if kind in _SKIPPED_ITEMS or (kind in {None, "message"} and role in _SKIPPED_ROLES):
                continue
            if kind == "function_call_output":
                self.close_assistant()
                self.results.append(self.result(item))
                continue
            self.close_results()
            if kind == "function_call":
                self.open_assistant = True
                self.calls.append(self.call(item))
            elif kind in {None, "message"} and role == "assistant":
                self.close_assistant()
                self.open_assistant = True
                self.text = _openai.text_of(read(item, "content"))
            elif kind in {None, "message"} and role == "user":
                self.close_assistant()
                self.turns.append(UserTurn(text=_openai.text_of(read(item, "content")) or ""))
            else:
                raise Untranslatable(
                    f"an item of type {kind!r} (role {role!r}) has no neutral form"
                )
        self.close_assistant()
        self.close_results()
        return self.turns

    def close_assistant(self) -> None:
        if self.open_assistant:
            self.turns.append(AssistantTurn(text=self.text, calls=tuple(self.calls)))
            self.names.update((call.id, call.name) for call in self.calls)
        self.open_assistant, self.text, self.calls = False, None, []

    def close_results(self) -> None:
        if self.results:
            self.turns.append(ToolResultsTurn(results=tuple(self.results)))
        self.results = []

    def call(self, item: object) -> ToolCall:
        call_id, name, arguments = (
            read(item, "call_id"),
            read(item, "name"),
            read(item, "arguments"),
        )
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise Untranslatable("a function_call item without a text call_id and name")
        if not isinstance(arguments, str):
            raise Untranslatable("function_call arguments that are not JSON text")
        return ToolCall(
            id=id_from_wire(call_id),
            name=name_from_wire(name),
            arguments=arguments,
            provider=PROVIDER,
            raw=item,
        )

    def result(self, item: object) -> ToolResult:
        call_id = read(item, "call_id")
        output = _openai.text_of(read(item, "output"))
        if not isinstance(call_id, str) or (call_id := id_from_wire(call_id)) not in self.names:
            raise Untranslatable("a function_call_output for an id no earlier call had")
        if output is None:
            raise Untranslatable("a function_call_output without output")
        return ToolResult(
            call_id=call_id,
            tool=self.names[call_id],
            content=output,
            is_error=_openai.is_error_content(output),
        )


@dataclass(slots=True)
class _Item:
    """One streamed function_call item: what `added` said, deltas, and `done` if seen."""

    output_index: int | None
    call_id: object = None
    name: object = None
    pieces: list[str] = field(default_factory=list)
    arguments: str | None = None
    """The full arguments from `arguments.done` or `output_item.done`: the source of truth."""
    status: object = None
    events: list[object] = field(default_factory=list)


class _ResponsesStream:
    """Assembles function_call items from Responses stream events.

    `output_item.added` opens an item (call_id, name); `function_call_arguments.delta`
    adds pieces by `item_id` (or `output_index`); `function_call_arguments.done` and
    `output_item.done` give the full arguments, which win over the pieces, so nothing
    counts twice. An event whose `sequence_number` was seen already is ignored.
    `response.completed` / `response.incomplete` / `response.failed` give the status:
    a call without its `done` in a stream that did not complete is defective, and so
    is one whose arguments never became JSON. The SDK's `responses.stream()` helper
    yields these same event types (some with a snapshot, which is not read), so its
    events are fed as they come; anything that is no Responses event is an
    UntranslatableError, never an empty result.
    """

    __slots__ = (
        "_by_id",
        "_by_index",
        "_items",
        "_last",
        "_reason",
        "_restore",
        "_seen",
        "_status",
    )

    def __init__(self, *, restore: Mapping[str, object]) -> None:
        self._restore = restore
        self._items: list[_Item] = []
        self._by_id: dict[str, _Item] = {}
        self._by_index: dict[int, _Item] = {}
        self._seen: set[int] = set()
        self._status: object = None
        self._reason: object = None
        self._last = _Item(output_index=None)

    def feed(self, event: object) -> None:
        """Take the next event; other `response.*` types and `error` pass untouched.

        Raises UntranslatableError for what is no Responses stream event: text, an
        object without a text `type`, another format's events, a whole Response.
        """
        kind = read(event, "type") if _openai.is_record(event) else None
        if not isinstance(kind, str) or not (kind.startswith("response.") or kind == "error"):
            what = type(event).__name__ if kind is None else f"an event of type {kind!r:.60}"
            raise Untranslatable(
                f"a Responses stream takes the events of responses.create(stream=True) or "
                f"responses.stream() (SDK objects or dicts), not {what}",
            )
        sequence = read(event, "sequence_number")
        if isinstance(sequence, int):
            if sequence in self._seen:
                return
            self._seen.add(sequence)
        if kind in {"response.output_item.added", "response.output_item.done"}:
            item = read(event, "item")
            if read(item, "type") == "function_call":
                index = read(event, "output_index")
                self._item_event(event, item, index, done=kind.endswith(".done"))
        elif kind == "response.function_call_arguments.delta":
            delta = read(event, "delta")
            if isinstance(delta, str):
                self._locate(event, read(event, "item_id"), read(event, "output_index"))
                self._last.pieces.append(delta)
        elif kind == "response.function_call_arguments.done":
            arguments = read(event, "arguments")
            if isinstance(arguments, str):
                self._locate(event, read(event, "item_id"), read(event, "output_index"))
                self._last.arguments = arguments
        elif kind in {"response.completed", "response.incomplete", "response.failed"}:
            response = read(event, "response")
            self._status = read(response, "status") or kind.removeprefix("response.")
            self._reason = read(read(response, "incomplete_details"), "reason")
            for index, item in enumerate(listed(read(response, "output"))):
                if read(item, "type") == "function_call":
                    self._item_event(event, item, index, done=True)

    def _locate(self, event: object, item_id: object, index: object) -> None:
        """Make the item an event is about `_last`, by item id or output index."""
        found = self._by_id.get(item_id) if isinstance(item_id, str) else None
        if found is None and isinstance(index, int):
            found = self._by_index.get(index)
        if found is None:
            found = _Item(output_index=index if isinstance(index, int) else None)
            self._items.append(found)
        if isinstance(item_id, str):
            self._by_id[item_id] = found
        if isinstance(index, int):
            self._by_index.setdefault(index, found)
        found.events.append(event)
        self._last = found

    def _item_event(self, event: object, item: object, index: object, *, done: bool) -> None:
        self._locate(event, read(item, "id"), index)
        found = self._last
        found.call_id = found.call_id or read(item, "call_id")
        found.name = found.name or read(item, "name")
        arguments = read(item, "arguments")
        if done:
            found.status = read(item, "status") or "completed"
            if isinstance(arguments, str):
                found.arguments = arguments
        elif isinstance(arguments, str) and arguments and not found.pieces:
            found.pieces.append(arguments)

    def finish(self) -> list[ToolCall]:
        """Every function_call of the stream in output order; cut-off ones defective."""
        cut = _status_defect(self._status, self._reason)
        order = sorted(
            range(len(self._items)),
            key=lambda i: (self._items[i].output_index is None, self._items[i].output_index, i),
        )
        calls = []
        for position in order:
            item = self._items[position]
            done = item.arguments is not None and item.status in (None, "completed")
            arguments = item.arguments if item.arguments is not None else "".join(item.pieces)
            defect = None
            if not done:
                defect = cut or "the stream ended before the call was complete"
            elif self._status not in (None, "completed", "incomplete"):
                defect = cut
            if defect is None and not _openai.is_complete_json(arguments):
                defect = "the streamed arguments are incomplete JSON"
            calls.append(
                _openai.make_call(
                    provider=PROVIDER,
                    call_id=item.call_id,
                    name=item.name,
                    arguments=arguments,
                    raw=tuple(item.events),
                    defect=defect,
                    restore=self._restore,
                ),
            )
        return calls


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list for specs already exposed, schemas as they are (`strict: false`).

    Kept for `handrail.adapters.tool_definitions` and the CLI export; use
    `OpenAIResponsesAdapter` to choose strict mode and to see what was rewritten.
    """
    return OpenAIResponsesAdapter(strict=False).tool_definitions(specs).payload


if TYPE_CHECKING:
    _ADAPTER: type[Adapter] = OpenAIResponsesAdapter
