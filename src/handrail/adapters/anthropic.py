"""Anthropic Messages wire format, both ways: `AnthropicAdapter`.

Definitions (`name`, `description`, `input_schema`, optionally `strict`) with every
schema feature Anthropic does not take rewritten or refused out loud (`_anthropic_schema`);
tool choice; tool_use blocks in, whole or streamed (`_anthropic_stream`); tool_result
blocks out; whole transcripts. Ids stay verbatim. It never decides exposure or policy.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from handrail.adapters._anthropic_schema import SchemaCheck
from handrail.adapters._anthropic_stream import (
    PROVIDER,
    AnthropicStreamAssembler,
    call_from_block,
    calls_of_message,
    wire_field,
)
from handrail.adapters._common import plain_json, sendable
from handrail.adapters._ids import id_from_wire, id_to_wire
from handrail.adapters._names import name_to_wire, to_wire_name
from handrail.adapters.base import (
    Definitions,
    IssueAction,
    SchemaIssue,
    ToolChoice,
    ToolChoiceMode,
    UnsupportedSchemaError,
    UntranslatableError,
)
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
from handrail.errors import ConfigurationError
from handrail.shaping.marking import DataMarker
from handrail.spec import ToolSpec

__all__ = ["PROVIDER", "AnthropicAdapter", "AnthropicStreamAssembler", "tool_definitions"]

_CHOICE_TYPES = {
    ToolChoiceMode.AUTO: "auto",
    ToolChoiceMode.NONE: "none",
    ToolChoiceMode.REQUIRED: "any",
    ToolChoiceMode.TOOL: "tool",
}


class AnthropicAdapter:
    """The Anthropic Messages API (`anthropic` SDK types), for one kind of request.

    `strict` sends every tool with `strict: true` (grammar-constrained inputs) after
    rewriting its schema into the subset strict mode takes. `parallel_calls=False`
    adds `disable_parallel_tool_use` to the tool choice: at most one call per turn.
    `max_streamed_input` bounds the characters one streamed call may buffer. `marker`
    wraps each result in its data block; a fresh `DataMarker` by default.
    """

    def __init__(
        self,
        *,
        strict: bool,
        parallel_calls: bool = True,
        max_streamed_input: int = 4 << 20,
        marker: DataMarker | None = None,
    ) -> None:
        if max_streamed_input < 1:
            raise ConfigurationError("max_streamed_input must be positive")
        self.provider = PROVIDER
        self._strict = strict
        self._marker = marker if marker is not None else DataMarker()
        self._parallel_calls = parallel_calls
        self._max_streamed_input = max_streamed_input

    @property
    def strict(self) -> bool:
        """Whether definitions are sent with `strict: true`."""
        return self._strict

    def tool_definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """The request's `tools`, each schema a deep copy; rewrites reported as issues.

        Raises UnsupportedSchemaError naming every refused feature of every tool.
        Nothing needs restoring: no rewrite changes the shape of the arguments.
        """
        payload: list[dict[str, Any]] = []
        issues: list[SchemaIssue] = []
        for spec, wire in sendable(specs):
            check = SchemaCheck(spec.name)
            schema = check.root(plain_json(spec.input_schema), strict=self._strict)
            issues.extend(check.issues)
            definition: dict[str, Any] = {
                "name": wire,
                "description": spec.model_description,
                "input_schema": schema,
            }
            if self._strict:
                definition["strict"] = True
            payload.append(definition)
        refused = [issue for issue in issues if issue.action is IssueAction.REFUSED]
        if refused:
            raise UnsupportedSchemaError(PROVIDER, refused)
        return Definitions(provider=PROVIDER, payload=payload, issues=tuple(issues))

    def tool_choice(self, choice: ToolChoice) -> dict[str, Any]:
        """`tool_choice`: auto, none, any (REQUIRED), or tool with its wire name."""
        value: dict[str, Any] = {"type": _CHOICE_TYPES[choice.mode]}
        if choice.tool is not None:
            value["name"] = to_wire_name(choice.tool)
        if not self._parallel_calls and choice.mode is not ToolChoiceMode.NONE:
            value["disable_parallel_tool_use"] = True
        return value

    def parse_calls(
        self,
        response: object,
        *,
        definitions: Definitions | None = None,  # noqa: ARG002 - no rewrite needs undoing
    ) -> list[ToolCall]:
        """The tool_use blocks of a `Message`, its dict or its JSON text, as ToolCalls.

        Under stop reason `max_tokens` (or the context window) a tool_use block that
        ends the content may be cut off, so it comes back defective; a `refusal`
        withdraws every call. Other blocks (text, thinking, server tools) are skipped.
        """
        if isinstance(response, str | bytes | bytearray):
            try:
                response = json.loads(response)
            except (ValueError, RecursionError):
                raise UntranslatableError("the response text is not JSON it can read") from None
        return calls_of_message(response)

    def stream(self, *, definitions: Definitions | None = None) -> AnthropicStreamAssembler:  # noqa: ARG002
        """A new assembler for the events of one streamed response."""
        return AnthropicStreamAssembler(max_input_chars=self._max_streamed_input)

    def render_results(
        self,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[dict[str, Any]]:
        """One user message of tool_result blocks in call order, matched by call id.

        Each block's content is the envelope's data block, `is_error` its status.
        Raises ConfigurationError (from `pair_results`) for an envelope of no call or
        a call without an envelope. No calls, no message.
        """
        turn = pair_results(calls, envelopes, marker=self._marker)
        if not turn.results:
            return []
        return [{"role": "user", "content": [_result_block(r) for r in turn.results]}]

    def to_wire(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """Alternating user and assistant messages for a whole conversation.

        Tool results open the next user message, and user text that follows them
        joins that message as text blocks after them (Anthropic wants roles to
        alternate and results first). A message is a plain string exactly when it
        holds one text. Raises UntranslatableError for what Anthropic would refuse:
        two assistant turns in a row, calls left unanswered or answered by other
        ids, a call id used twice, blank user text, an empty assistant turn, or
        arguments that are not a JSON object.
        """
        state = _AnthropicWire()
        state.extend(transcript)
        return state.wire()

    def renderer(self, *, conversations: int = 16) -> TranscriptRenderer:
        """A renderer that gives what `to_wire` gives, rendering each new turn only once.

        The last user message stays open while results and user text may still join it.
        """
        return TranscriptRenderer(_AnthropicWire, conversations=conversations)

    def from_wire(self, messages: Sequence[object]) -> list[Turn]:
        """Neutral turns for Messages API messages (dicts, params or SDK `Message`s).

        A user message splits into the results it opens with and one user turn per
        text block after them; a result's tool name is that of its call. Assistant
        text blocks are joined as they are (citations split one text into several).
        Raises UntranslatableError for content a transcript cannot hold: system
        messages, images, documents, thinking and server-tool blocks, results for
        no call of the previous assistant turn, results after text.
        """
        turns: list[Turn] = []
        for position, message in enumerate(messages):
            role, content = wire_field(message, "role"), wire_field(message, "content")
            if role == "assistant":
                turns.append(_assistant_turn(content))
            elif role == "user":
                turns.extend(_user_turns(content, turns[-1] if turns else None))
            else:
                msg = f"message {position} has role {role!r}, which no transcript turn holds"
                raise UntranslatableError(msg)
        return turns


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list for specs already exposed, when no schema needs a rewrite.

    The list alone cannot carry rewrite reports, so a schema that needs one raises
    UnsupportedSchemaError here; use `AnthropicAdapter.tool_definitions` for those.
    """
    definitions = AnthropicAdapter(strict=False).tool_definitions(specs)
    if definitions.issues:
        raise UnsupportedSchemaError(PROVIDER, definitions.issues)
    return definitions.payload


# --- ids -----------------------------------------------------------------------------------

_WIRE_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""What Anthropic accepts as a tool_use id."""


def _carried(call_id: str) -> bool:
    return _WIRE_ID.fullmatch(call_id) is not None


def _id_to_wire(call_id: str) -> str:
    """The id itself when Anthropic takes it; otherwise a reversible escape of it.

    Ids a model minted on Anthropic (`toolu_...`) always go verbatim; ids from other
    providers' transcripts may hold `.`, `:` or `|`, which Anthropic refuses.
    """
    return id_to_wire(call_id, carried=_carried)


def _id_from_wire(wire: str) -> str:
    """The exact inverse of `_id_to_wire`; any other id is kept verbatim."""
    return id_from_wire(wire, carried=_carried)


# --- transcripts ---------------------------------------------------------------------------


class _AnthropicWire:
    """A transcript's messages so far, the last user message still open (`WireState`)."""

    __slots__ = ("_messages", "_previous", "_seen", "_user")

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._user: list[dict[str, Any]] = []
        """The blocks of the user message still open: results, then user text."""
        self._seen: set[str] = set()
        self._previous: Turn | None = None

    def extend(self, turns: Sequence[Turn]) -> None:
        messages, user, seen, previous = self._messages, self._user, self._seen, self._previous
        for turn in turns:
            pending = previous.calls if isinstance(previous, AssistantTurn) else ()
            if isinstance(turn, AssistantTurn):
                if isinstance(previous, AssistantTurn):
                    raise UntranslatableError(
                        "two assistant turns in a row: Anthropic would merge them into one",
                    )
                _flush(messages, user)
                messages.append(_message("assistant", _assistant_blocks(turn, seen)))
            elif isinstance(turn, ToolResultsTurn):
                _check_answers(pending, turn.results)
                user.extend(_result_block(result) for result in turn.results)
            else:
                if pending:
                    raise UntranslatableError("user text cannot answer calls; results must")
                if not turn.text.strip():
                    raise UntranslatableError("Anthropic refuses blank user text")
                user.append({"type": "text", "text": turn.text})
            previous = turn
            self._previous = turn

    def wire(self) -> list[dict[str, Any]]:
        if not self._user:
            return list(self._messages)
        return [*self._messages, _message("user", list(self._user))]


def _message(role: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """A message; its content a plain string exactly when it is one text."""
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"role": role, "content": blocks[0]["text"]}
    return {"role": role, "content": blocks}


def _flush(messages: list[dict[str, Any]], user: list[dict[str, Any]]) -> None:
    if user:
        messages.append(_message("user", list(user)))
        user.clear()


def _result_block(result: ToolResult) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": _id_to_wire(result.call_id),
        "content": result.content,
        "is_error": result.is_error,
    }


def _check_answers(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> None:
    if not calls:
        raise UntranslatableError("tool results must follow an assistant turn with calls")
    if Counter(c.id for c in calls) != Counter(r.call_id for r in results):
        raise UntranslatableError("the results must answer exactly the previous turn's calls")


def _reject_constant(name: str) -> object:
    raise UntranslatableError(f"arguments hold {name}, which is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise UntranslatableError("arguments repeat a key, which an input object cannot")
    return dict(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_reject_constant)


def _input_object(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the `input` object Anthropic requires."""
    arguments = call.arguments
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return {str(k): plain_json(v) for k, v in arguments.items()}
    try:
        text = arguments if isinstance(arguments, str) else bytes(arguments).decode()
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        msg = f"call {call.id[:64]!r}: its arguments are not a JSON object"
        raise UntranslatableError(msg)
    return value


def _assistant_blocks(turn: AssistantTurn, seen: set[str]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.text is not None and turn.text.strip():
        blocks.append({"type": "text", "text": turn.text})  # blank text is no block
    for call in turn.calls:
        if call.id in seen:
            raise UntranslatableError(f"call id {call.id[:64]!r} is used twice")
        seen.add(call.id)
        blocks.append(
            {
                "type": "tool_use",
                "id": _id_to_wire(call.id),
                "name": name_to_wire(call.name),
                "input": _input_object(call),
            },
        )
    if not blocks:
        raise UntranslatableError("an assistant turn with neither text nor calls")
    return blocks


def _blocks(content: object, *, empty: bool = False) -> Sequence[object]:
    if not isinstance(content, Sequence) or isinstance(content, str | bytes):
        raise UntranslatableError("message content is neither text nor a list of blocks")
    if not content and not empty:
        raise UntranslatableError("a message with no content")
    return content


def _assistant_turn(content: object) -> AssistantTurn:
    if isinstance(content, str):
        return AssistantTurn(text=content)
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in _blocks(content):
        kind = wire_field(block, "type")
        if kind == "text":
            texts.append(str(wire_field(block, "text") or ""))
        elif kind == "tool_use":
            call = call_from_block(block)
            calls.append(replace(call, id=_id_from_wire(call.id)))
        else:
            raise UntranslatableError(f"an assistant {kind!r} block has no neutral form")
    return AssistantTurn(text="".join(texts) if texts else None, calls=tuple(calls))


def _result_text(content: object) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for block in _blocks(content, empty=True):
        if wire_field(block, "type") != "text":
            raise UntranslatableError("a tool result holds a block other than text")
        texts.append(str(wire_field(block, "text") or ""))
    return "".join(texts)


def _user_turns(content: object, previous: Turn | None) -> list[Turn]:
    if isinstance(content, str):
        return [UserTurn(text=content)]
    names: dict[str, list[str]] = {}
    for call in previous.calls if isinstance(previous, AssistantTurn) else ():
        names.setdefault(call.id, []).append(call.name)
    results: list[ToolResult] = []
    turns: list[Turn] = []
    for block in _blocks(content):
        kind = wire_field(block, "type")
        if kind == "tool_result":
            call_id = wire_field(block, "tool_use_id")
            call_id = _id_from_wire(call_id) if isinstance(call_id, str) else ""
            if turns or not names.get(call_id):
                raise UntranslatableError(f"a result for {call_id[:64]!r} answers no open call")
            content_text = _result_text(wire_field(block, "content"))
            is_error = bool(wire_field(block, "is_error"))
            tool = names[call_id].pop(0)
            results.append(
                ToolResult(call_id=call_id, tool=tool, content=content_text, is_error=is_error),
            )
        elif kind == "text":
            turns.append(UserTurn(text=str(wire_field(block, "text") or "")))
        else:
            raise UntranslatableError(f"a user {kind!r} block has no neutral form")
    return [ToolResultsTurn(results=tuple(results)), *turns] if results else turns
