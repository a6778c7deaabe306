"""Anthropic Messages, the reading half: tool_use blocks and stream events to ToolCalls.

Reads content blocks and streaming events, as SDK objects or plain dicts, into
ToolCalls with ids kept verbatim, and marks the calls a truncated, refused or broken
response cannot vouch for as defective, for the gate to refuse. It never validates,
authorizes or runs a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from handrail.adapters._names import name_from_wire, wire_name_defect
from handrail.adapters.base import UntranslatableError
from handrail.calls import ToolCall

_EVENT_TYPE = re.compile(r"[a-z][a-z_]*")
"""What every Anthropic stream event type looks like, the future ones too."""

__all__ = [
    "PROVIDER",
    "AnthropicStreamAssembler",
    "call_from_block",
    "calls_of_message",
    "wire_field",
]

PROVIDER = "anthropic"

_TRUNCATING = frozenset({"max_tokens", "model_context_window_exceeded"})
"""Stop reasons that cut the response off wherever it was: the open block is partial."""
_REFUSED = "refusal"
"""The stop reason of a response withdrawn by Anthropic's classifiers."""

Arguments = str | Mapping[str, object] | None


def wire_field(obj: object, name: str) -> object:
    """A field of a wire object: a mapping's key or an SDK model's attribute, else None."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _identity(block: object) -> tuple[str, str, str | None]:
    """The verbatim id, the Handrail name and, when the id or name is unusable, why."""
    call_id, name = wire_field(block, "id"), wire_field(block, "name")
    wire = name if isinstance(name, str) else ""
    if isinstance(call_id, str) and call_id:
        return call_id, name_from_wire(wire), wire_name_defect(wire)
    missing = "the tool_use block has no id"
    return (call_id if isinstance(call_id, str) else ""), name_from_wire(wire), missing


def _input(value: object) -> tuple[Arguments, str | None]:
    """A tool_use `input` as arguments, with a defect unless it is a JSON object."""
    if isinstance(value, Mapping):
        return value, None
    if value is None:
        return None, "the tool_use block has no input object"
    return (value if isinstance(value, str) else None), "the tool_use input is not a JSON object"


def call_from_block(block: object, *, defect: str | None = None) -> ToolCall:
    """One tool_use block as a ToolCall: id verbatim, name mapped back, input kept.

    A block without an id or whose input is not an object becomes a defective call,
    never a dropped one, so that the model hears about it.
    """
    call_id, name, bad_id = _identity(block)
    arguments, bad_input = _input(wire_field(block, "input"))
    return ToolCall(
        id=call_id,
        name=name,
        arguments=arguments,
        provider=PROVIDER,
        raw=block,
        defect=defect or bad_id or bad_input,
    )


def _stop_defect(stop_reason: object, *, last: bool) -> str | None:
    """Why a stop reason leaves a call unusable: refusals all, truncation the open one."""
    if stop_reason == _REFUSED:
        return "the response was withdrawn (stop reason refusal) and this call with it"
    if stop_reason in _TRUNCATING and last:
        return f"the response was cut off ({stop_reason}) before this call was complete"
    return None


def calls_of_message(message: object) -> list[ToolCall]:
    """The tool calls of one whole (non-streamed) Messages response, in content order.

    A block is complete once a later block began. When the response stopped at
    `max_tokens` or at the context window, the final content block may be cut off
    and Anthropic's parsed `input` cannot show it, so a tool_use block that ends the
    content is defective; a refusal withdraws every call of the response.
    """
    content = wire_field(message, "content")
    if not isinstance(content, Sequence) or isinstance(content, str | bytes):
        raise UntranslatableError("the response has no content list of a Messages response")
    stop_reason = wire_field(message, "stop_reason")
    last = len(content) - 1
    return [
        call_from_block(block, defect=_stop_defect(stop_reason, last=position == last))
        for position, block in enumerate(content)
        if wire_field(block, "type") == "tool_use"
    ]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except RecursionError:
        return True  # deep but maybe well-formed; the gate's depth limit refuses it
    except ValueError:
        return False
    return True


def _index(event: object) -> int | None:
    index = wire_field(event, "index")
    return index if type(index) is int and index >= 0 else None


@dataclass(slots=True)
class _Block:
    """One streamed tool_use block: its start event and the fragments of its input."""

    start: object
    fragments: list[str] = field(default_factory=list)
    size: int = 0
    closed: bool = False
    problem: str | None = None


class AnthropicStreamAssembler:
    """Assembles the tool_use blocks of one streamed Messages response, by block index.

    Only raw events carry input: `content_block_delta` with an `input_json_delta`.
    The SDK's derived events (`input_json` with its snapshot, the accumulated block
    on `content_block_stop`) are read for their index at most, so that a fragment is
    never added twice whichever events a caller forwards. A block is complete when
    its `content_block_stop` arrived, its fragments parse, and no truncating stop
    reason cut it (the last block started); anything else comes back defective.
    """

    def __init__(self, *, max_input_chars: int) -> None:
        self._max_input_chars = max_input_chars
        self._blocks: dict[int, _Block] = {}
        self._last_started = -1
        self._stop_reason: object = None

    def feed(self, event: object) -> None:
        """Take the next stream event; unknown event types (`ping`, ...) are skipped.

        Anthropic may add event types, so an unknown snake_case type is skipped; a type
        no Anthropic event has (`response.output_item.added`, another format's stream)
        is `UntranslatableError`, so a wrong stream is never read as one without calls.
        """
        kind = wire_field(event, "type")
        if not isinstance(kind, str):
            msg = f"a stream event is an SDK event object or a dict with a type, not {event!r:.80}"
            raise TypeError(msg)
        if _EVENT_TYPE.fullmatch(kind) is None:
            msg = f"{kind[:80]!r} is not an Anthropic stream event type"
            raise UntranslatableError(msg)
        if kind == "content_block_start":
            self._start(event)
        elif kind == "content_block_delta":
            self._delta(event)
        elif kind == "content_block_stop":
            index = _index(event)
            block = self._blocks.get(index) if index is not None else None
            if block is not None:
                block.closed = True
        elif kind == "message_delta":
            stop_reason = wire_field(wire_field(event, "delta"), "stop_reason")
            if stop_reason is not None:
                self._stop_reason = stop_reason

    def _start(self, event: object) -> None:
        index = _index(event)
        if index is None:
            return
        self._last_started = max(self._last_started, index)
        started = self._blocks.get(index)
        if started is not None:
            started.problem = started.problem or "the stream started this call's block twice"
            return
        block = wire_field(event, "content_block")
        if wire_field(block, "type") == "tool_use":
            self._blocks[index] = _Block(start=block)

    def _delta(self, event: object) -> None:
        index = _index(event)
        block = self._blocks.get(index) if index is not None else None
        delta = wire_field(event, "delta")
        if block is None or wire_field(delta, "type") != "input_json_delta":
            return  # text, thinking, citations, or a server tool's input
        fragment = wire_field(delta, "partial_json")
        if block.problem is not None:
            return
        if block.closed:
            block.problem = "input arrived after the stream closed this call's block"
        elif not isinstance(fragment, str):
            block.problem = "a fragment of the streamed input is not text"
        elif block.size + len(fragment) > self._max_input_chars:
            block.problem = f"the streamed input exceeded {self._max_input_chars} characters"
            block.fragments.clear()
        else:
            block.fragments.append(fragment)
            block.size += len(fragment)

    def finish(self) -> list[ToolCall]:
        """Every tool call of the stream in block order; incomplete ones defective."""
        return [self._call(index, self._blocks[index]) for index in sorted(self._blocks)]

    def _call(self, index: int, block: _Block) -> ToolCall:
        call_id, name, bad_id = _identity(block.start)
        text = "".join(block.fragments)
        if text.strip():
            arguments: Arguments = text
            bad_input = None if _parses(text) else "the streamed input is not valid JSON"
        else:
            # No fragments (or only empty ones): the input is the start's, `{}` as sent.
            arguments, bad_input = _input(wire_field(block.start, "input"))
        defect = (
            block.problem
            or _stop_defect(self._stop_reason, last=index == self._last_started)
            or (None if block.closed else "the stream ended before this call was complete")
            or bad_input
            or bad_id
        )
        return ToolCall(
            id=call_id,
            name=name,
            arguments=arguments,
            provider=PROVIDER,
            raw=block.start,
            defect=defect,
        )
