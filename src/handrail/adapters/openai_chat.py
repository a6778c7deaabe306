"""OpenAI Chat Completions wire format, both ways: `OpenAIChatAdapter`.

Tool definitions (strict mode or not) and tool choice out; tool calls in, from whole
completions and from streamed chunks; results and whole transcripts back as messages.
Ids are kept verbatim, names mapped by `_names`. It never decides exposure or policy,
and reads SDK objects and plain dicts alike without importing the `openai` SDK.
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

__all__ = ["PROVIDER", "OpenAIChatAdapter", "tool_definitions"]

PROVIDER = "openai-chat"

# A finish reason after which the calls of the message may be cut off mid-arguments.
_CUT_OFF = frozenset({"length", "content_filter"})


def _shape(spec: ToolSpec, wire: str, schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": wire,
            "description": spec.model_description,
            "parameters": schema,
            "strict": strict,
        },
    }


def _finish_defect(finish_reason: object) -> str | None:
    if finish_reason in _CUT_OFF:
        return f"the arguments were truncated: finish_reason={finish_reason}"
    return None


class OpenAIChatAdapter:
    """Chat Completions (`/v1/chat/completions`), with or without strict function calling.

    `strict` has no default, since neither choice is always right: strict mode makes the
    model's arguments follow the schema's shape but takes only a subset of JSON Schema
    (`_strict` lists what is rewritten and what is refused: a `dict[str, X]` parameter,
    for one, cannot be strict); without it the schema is sent as it is and only guides.
    `marker` wraps each result in its data block; a fresh `DataMarker` by default.
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
        """`{"type": "function", "function": {...}}` per exposed spec.

        Raises UnsupportedSchemaError in strict mode for a schema it cannot take.
        """
        return _openai.build_definitions(PROVIDER, specs, strict=self._strict, shape=_shape)

    def tool_choice(self, choice: ToolChoice) -> object:
        """`"auto"`, `"none"`, `"required"` or `{"type": "function", "function": {"name"}}`."""
        match choice.mode:
            case ToolChoiceMode.AUTO | ToolChoiceMode.NONE | ToolChoiceMode.REQUIRED:
                return choice.mode.value
            case ToolChoiceMode.TOOL:
                name = to_wire_name(str(choice.tool))
                return {"type": "function", "function": {"name": name}}
            case _:  # pragma: no cover - closed by the enum
                assert_never(choice.mode)

    def parse_calls(
        self,
        response: object,
        *,
        definitions: Definitions | None = None,
    ) -> list[ToolCall]:
        """The tool calls of `choices[0]`, in order.

        Takes a ChatCompletion (SDK object, dict or JSON text), one of its choices, or
        a bare assistant message (whose finish reason is unknown, so taken as complete).
        With finish reason `length` or `content_filter` every call is defective.
        Arguments stay the model's text unless strict mode's nulls had to be dropped.
        """
        restore = _openai.restorers(PROVIDER, definitions)
        document = _openai.load(response)
        choice: object = document
        if read(document, "choices") is not None:
            choices = listed(read(document, "choices"))
            if not choices:
                return []
            choice = choices[0]
        message = read(choice, "message")
        if message is None:
            message, finish_reason = choice, None
        else:
            finish_reason = read(choice, "finish_reason")
        defect = _finish_defect(finish_reason)
        return [_call(item, defect, restore) for item in listed(read(message, "tool_calls"))]

    def stream(self, *, definitions: Definitions | None = None) -> StreamAssembler:
        """An assembler for one streamed completion, fed its events in stream order.

        It takes ChatCompletionChunks (SDK objects or dicts) as `create(stream=True)`
        yields them, or every event of the SDK's `chat.completions.stream()` helper.
        Anything else fed in raises UntranslatableError.
        """
        return _ChatStream(restore=_openai.restorers(PROVIDER, definitions))

    def render_results(
        self,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[dict[str, Any]]:
        """One `{"role": "tool", "tool_call_id", "content"}` message per call, in call order.

        The content is the envelope's data block. Raises ConfigurationError for an
        envelope no call asked for, or a call left without one (`pair_results`).
        """
        turn = pair_results(calls, envelopes, marker=self._marker)
        return [_tool_message(result) for result in turn.results]

    def to_wire(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """Chat messages: user, assistant (text, tool calls) and tool messages.

        Raises UntranslatableError for what would not read back unchanged
        (`_openai.check_transcript`), for instance `is_error` disagreeing with the
        envelope's status.
        """
        state = _ChatWire()
        state.extend(transcript)
        return state.wire()

    def renderer(self, *, conversations: int = 16) -> TranscriptRenderer:
        """A renderer that gives what `to_wire` gives, rendering each new turn only once."""
        return TranscriptRenderer(_ChatWire, conversations=conversations)

    def from_wire(self, messages: Sequence[object]) -> list[Turn]:
        """Neutral turns from chat messages (dicts or SDK objects).

        System and developer messages are not tool-relevant and are skipped; a tool
        message gets its tool name from the earlier call with its id, and `is_error`
        from its envelope's status. Raises UntranslatableError for what has no neutral
        form: legacy function messages, custom tool calls, non-text content, a result
        for an id no earlier call had.
        """
        turns: list[Turn] = []
        names: dict[str, str] = {}
        pending: list[ToolResult] = []
        for message in messages:
            role = read(message, "role")
            if role != "tool" and pending:
                turns.append(ToolResultsTurn(results=tuple(pending)))
                pending = []
            if role == "user":
                turns.append(UserTurn(text=_openai.text_of(read(message, "content")) or ""))
            elif role == "assistant":
                turn = _assistant_turn(message)
                names.update((call.id, call.name) for call in turn.calls)
                turns.append(turn)
            elif role == "tool":
                pending.append(_tool_result(message, names))
            elif role not in {"system", "developer"}:
                raise Untranslatable(f"a chat message with role {role!r} has no neutral form")
        if pending:
            turns.append(ToolResultsTurn(results=tuple(pending)))
        return turns


class _ChatWire:
    """A transcript's chat messages so far (`rendering.WireState`)."""

    __slots__ = ("_check", "_messages")

    def __init__(self) -> None:
        self._check = _openai.TranscriptCheck(merges_assistant_turns=False)
        self._messages: list[dict[str, Any]] = []

    def extend(self, turns: Sequence[Turn]) -> None:
        # Every new turn is checked before any is rendered, as for a whole transcript.
        self._check.extend(turns)
        messages = self._messages
        for turn in turns:
            if isinstance(turn, UserTurn):
                messages.append({"role": "user", "content": turn.text})
            elif isinstance(turn, AssistantTurn):
                messages.append(_assistant_message(turn))
            elif isinstance(turn, ToolResultsTurn):
                messages.extend(_tool_message(result) for result in turn.results)
            else:  # pragma: no cover - closed by the Turn union
                assert_never(turn)

    def wire(self) -> list[dict[str, Any]]:
        return list(self._messages)


def _call(item: object, defect: str | None, restore: Mapping[str, object]) -> ToolCall:
    kind = read(item, "type")
    if kind == "custom":
        custom = read(item, "custom")
        name, arguments = read(custom, "name"), read(custom, "input")
        defect = defect or "a custom tool call; Handrail sends function tools only"
    else:
        function = read(item, "function")
        name, arguments = read(function, "name"), read(function, "arguments")
    return _openai.make_call(
        provider=PROVIDER,
        call_id=read(item, "id"),
        name=name,
        arguments=arguments,
        raw=item,
        defect=defect,
        restore=restore,
    )


def _tool_message(result: ToolResult) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": id_to_wire(result.call_id), "content": result.content}


def _assistant_message(turn: AssistantTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": id_to_wire(call.id),
                "type": "function",
                "function": {
                    "name": name_to_wire(call.name),
                    "arguments": _openai.arguments_text(call.arguments),
                },
            }
            for call in turn.calls
        ]
    return message


def _assistant_turn(message: object) -> AssistantTurn:
    calls = []
    for item in listed(read(message, "tool_calls")):
        if read(item, "type") not in {None, "function"}:
            raise Untranslatable(f"a tool call of type {read(item, 'type')!r} has no neutral form")
        function = read(item, "function")
        call_id, name, arguments = (
            read(item, "id"),
            read(function, "name"),
            read(function, "arguments"),
        )
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise Untranslatable("a tool call without a text id and name")
        if not isinstance(arguments, str):
            raise Untranslatable("tool call arguments that are not JSON text")
        calls.append(
            ToolCall(
                id=id_from_wire(call_id),
                name=name_from_wire(name),
                arguments=arguments,
                provider=PROVIDER,
                raw=item,
            ),
        )
    return AssistantTurn(text=_openai.text_of(read(message, "content")), calls=tuple(calls))


def _tool_result(message: object, names: Mapping[str, str]) -> ToolResult:
    call_id = read(message, "tool_call_id")
    content = _openai.text_of(read(message, "content"))
    if not isinstance(call_id, str) or (call_id := id_from_wire(call_id)) not in names:
        raise Untranslatable("a tool message for an id no earlier assistant call had")
    if content is None:
        raise Untranslatable("a tool message without content")
    return ToolResult(
        call_id=call_id,
        tool=names[call_id],
        content=content,
        is_error=_openai.is_error_content(content),
    )


@dataclass(slots=True)
class _Partial:
    """One streamed call, by its `index`: id and name once, argument pieces in order."""

    call_id: str | None = None
    name: str | None = None
    pieces: list[str] = field(default_factory=list)
    fragments: list[object] = field(default_factory=list)
    conflict: str | None = None


_CHUNK_OBJECT = "chat.completion.chunk"
_NOT_A_CHUNK = (
    "a Chat Completions stream takes ChatCompletionChunks or the events of the SDK's "
    "chat.completions.stream() helper (SDK objects or dicts), not {kind}"
)
_DERIVED_CALL_EVENTS = frozenset(
    {"tool_calls.function.arguments.delta", "tool_calls.function.arguments.done"},
)
_DERIVED_EVENTS = _DERIVED_CALL_EVENTS | {
    "content.delta",
    "content.done",
    "refusal.delta",
    "refusal.done",
    "logprobs.content.delta",
    "logprobs.content.done",
    "logprobs.refusal.delta",
    "logprobs.refusal.done",
}
"""The stream helper's events derived from a ChunkEvent's chunk, which is read instead."""


def _fragments(choice: object) -> list[object]:
    """The tool-call fragments of one streamed choice; refuses a shape no chunk has."""
    if not _openai.is_record(choice):
        raise Untranslatable("a chunk's choice is not an object")
    delta = read(choice, "delta")
    if delta is None:
        if read(choice, "message") is not None:
            raise Untranslatable("a whole completion's choice, not a chunk's: use parse_calls")
        return []  # a choice with only its finish reason
    if not _openai.is_record(delta):
        raise Untranslatable("a chunk's delta is not an object")
    tool_calls = read(delta, "tool_calls")
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list | tuple):
        raise Untranslatable("a chunk's delta.tool_calls is not an array")
    if not all(_openai.is_record(fragment) for fragment in tool_calls):
        raise Untranslatable("a tool-call fragment of a chunk is not an object")
    return list(tool_calls)


class _ChatStream:
    """Assembles `choices[0].delta.tool_calls` fragments by index.

    It reads raw `ChatCompletionChunk`s (SDK objects or dicts) and the events of the
    SDK's `chat.completions.stream()` helper. Of those, only `ChunkEvent`'s raw `chunk`
    is read: the helper derives its delta and done events from that chunk, so they are
    skipped and nothing counts twice. A derived tool-call event whose index no chunk
    opened means the chunks were not fed, and is an error rather than a lost call.

    The first fragment of an index carries id and name; later ones add argument
    pieces, each added exactly once, in the order fed. The finish reason decides:
    `tool_calls` / `stop` complete the calls; `length` / `content_filter`, or a stream
    that ends without one, mark them defective; so does argument text that never
    became JSON. Anything else fed in is an UntranslatableError, never an empty result.
    """

    __slots__ = ("_calls", "_finish_reason", "_opened", "_restore")

    def __init__(self, *, restore: Mapping[str, object]) -> None:
        self._restore = restore
        self._calls: dict[int, _Partial] = {}
        self._opened: set[int] = set()
        """Tool-call indices any chunk carried, in any choice: what derived events may name."""
        self._finish_reason: str | None = None

    def feed(self, event: object) -> None:
        """Take the next chunk or helper event; other choices than 0 are ignored.

        Raises UntranslatableError for anything that is neither: text, another
        format's events, a whole completion, a chunk whose parts have the wrong shape.
        """
        if not _openai.is_record(event):
            raise Untranslatable(_NOT_A_CHUNK.format(kind=type(event).__name__))
        kind = read(event, "type")
        if kind is not None and not isinstance(kind, str):
            raise Untranslatable(_NOT_A_CHUNK.format(kind="an event whose type is not text"))
        if kind == "chunk":
            self._chunk(read(event, "chunk"), "the helper's ChunkEvent has no chunk")
        elif kind in _DERIVED_EVENTS:
            index = read(event, "index")
            if kind in _DERIVED_CALL_EVENTS and not (
                isinstance(index, int) and index in self._opened
            ):
                raise Untranslatable(
                    f"a {kind!r} event for a call no chunk opened: feed every event of the "
                    f"stream helper (its ChunkEvents carry the calls), or the raw chunks",
                )
        else:
            what = f"an event of type {kind!r:.60}" if kind else f"a {type(event).__name__}"
            self._chunk(event, _NOT_A_CHUNK.format(kind=f"{what} without a choices array"))

    def _chunk(self, chunk: object, unreadable: str) -> None:
        if not _openai.is_record(chunk):
            raise Untranslatable(unreadable)
        kind, choices = read(chunk, "object"), read(chunk, "choices")
        if kind is not None and kind != _CHUNK_OBJECT:
            raise Untranslatable(f"a {kind!r:.40} object is not a ChatCompletionChunk")
        if not isinstance(choices, list | tuple):
            raise Untranslatable(unreadable)
        for choice in choices:
            fragments = _fragments(choice)
            self._opened.update(
                index for f in fragments if isinstance(index := read(f, "index"), int)
            )
            index = read(choice, "index")
            if index is not None and index != 0:
                continue
            for fragment in fragments:
                self._add(fragment)
            reason = read(choice, "finish_reason")
            if isinstance(reason, str):
                self._finish_reason = reason

    def _add(self, fragment: object) -> None:
        index = read(fragment, "index")
        if not isinstance(index, int):
            index = (
                max(self._calls, default=0) if read(fragment, "id") is None else len(self._calls)
            )
        partial = self._calls.setdefault(index, _Partial())
        partial.fragments.append(fragment)
        call_id = read(fragment, "id")
        if isinstance(call_id, str) and call_id:
            if partial.call_id not in {None, call_id}:
                partial.conflict = "two ids for one streamed call"
            partial.call_id = partial.call_id or call_id
        function = read(fragment, "function")
        name = read(function, "name")
        if isinstance(name, str) and name:
            if partial.name not in {None, name}:
                partial.conflict = "two names for one streamed call"
            partial.name = partial.name or name
        piece = read(function, "arguments")
        if isinstance(piece, str):
            partial.pieces.append(piece)

    def finish(self) -> list[ToolCall]:
        """Every call of the stream in index order; cut-off ones defective."""
        reason = self._finish_reason
        if reason is None:
            cut: str | None = "the stream ended without a finish reason; the call may be cut off"
        else:
            cut = _finish_defect(reason)
        calls = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            arguments = "".join(partial.pieces)
            defect = cut or partial.conflict
            if defect is None and not _openai.is_complete_json(arguments):
                defect = "the streamed arguments are incomplete JSON"
            calls.append(
                _openai.make_call(
                    provider=PROVIDER,
                    call_id=partial.call_id,
                    name=partial.name,
                    arguments=arguments,
                    raw=tuple(partial.fragments),
                    defect=defect,
                    restore=self._restore,
                ),
            )
        return calls


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list for specs already exposed, schemas as they are (`strict: false`).

    Kept for `handrail.adapters.tool_definitions` and the CLI export; use
    `OpenAIChatAdapter` to choose strict mode and to see what was rewritten.
    """
    return OpenAIChatAdapter(strict=False).tool_definitions(specs).payload


if TYPE_CHECKING:
    _ADAPTER: type[Adapter] = OpenAIChatAdapter
