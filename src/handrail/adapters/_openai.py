"""What the two OpenAI wire formats share, so that each module holds only its own shapes.

Definitions (strict or not) with their issues and restorers; reading SDK objects,
plain dicts and JSON text alike; turning a wire call into a ToolCall (name mapping,
defects, undoing strict mode); and the rules that make neutral → wire → neutral
lossless. It never decides exposure or policy, and never imports the `openai` SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, assert_never

from handrail.adapters._common import plain_json, sendable
from handrail.adapters._names import name_from_wire, name_to_wire, wire_name_defect
from handrail.adapters._strict import Restorer, make_strict, report_unsupported
from handrail.adapters.base import (
    Definitions,
    IssueAction,
    SchemaIssue,
    UnsupportedSchemaError,
    UntranslatableError,
)
from handrail.adapters.transcript import AssistantTurn, ToolResult, ToolResultsTurn, Turn, UserTurn
from handrail.calls import ToolCall
from handrail.checks.syntax import ArgumentLimits, parse_arguments
from handrail.errors import ConfigurationError, Refusal
from handrail.shaping.marking import read_block
from handrail.spec import ToolSpec

__all__ = [
    "Shape",
    "TranscriptCheck",
    "arguments_text",
    "build_definitions",
    "check_transcript",
    "field",
    "is_complete_json",
    "is_error_content",
    "is_record",
    "listed",
    "load",
    "make_call",
    "restorers",
    "text_of",
]

Shape = Callable[[ToolSpec, str, dict[str, Any], bool], dict[str, Any]]
"""Builds one tool definition from (spec, wire name, parameters schema, strict)."""

# Strict mode's nulls are undone only for arguments the gate would parse with its
# default limits; larger ones reach the gate as sent (and their nulls are refused there).
_RESTORE_LIMITS = ArgumentLimits()
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_NOT_RECORDS = (str, bytes, bytearray, memoryview, int, float, complex, list, tuple, set, frozenset)


def field(obj: object, name: str) -> Any:  # noqa: ANN401 - wire values have any shape
    """`obj[name]` of a mapping or `obj.name` of an SDK object; None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def is_record(value: object) -> bool:
    """Whether a wire value is an object (a mapping or an SDK model), not a scalar or array."""
    return isinstance(value, Mapping) or not (value is None or isinstance(value, _NOT_RECORDS))


def listed(value: object) -> list[Any]:
    """A wire array as a list; anything else (absent, null, a scalar) as empty."""
    return list(value) if isinstance(value, list | tuple) else []


def load(response: object) -> object:
    """A response given as JSON text (str or bytes) decoded; anything else as it is."""
    if isinstance(response, str | bytes | bytearray):
        try:
            return json.loads(response)
        except ValueError as exc:
            raise ConfigurationError("the response text is not JSON") from exc
    return response


def build_definitions(
    provider: str,
    specs: Sequence[ToolSpec],
    *,
    strict: bool,
    shape: Shape,
) -> Definitions:
    """Definitions of `specs`; raises UnsupportedSchemaError for what strict mode refuses."""
    payload: list[dict[str, Any]] = []
    issues: list[SchemaIssue] = []
    restore: dict[str, Restorer] = {}
    for spec, wire in sendable(specs):
        if strict:
            converted = make_strict(spec.name, spec.input_schema)
            schema = converted.schema
            issues.extend(converted.issues)
            if converted.restorer is not None:
                restore[spec.name] = converted.restorer
        else:
            schema = plain_json(spec.input_schema)
            issues.extend(report_unsupported(spec.name, spec.input_schema))
        payload.append(shape(spec, wire, schema, strict))
    refused = [issue for issue in issues if issue.action is IssueAction.REFUSED]
    if refused:
        raise UnsupportedSchemaError(provider, refused)
    return Definitions(
        provider=provider,
        payload=payload,
        issues=tuple(issues),
        restore=MappingProxyType(restore),
    )


def restorers(provider: str, definitions: Definitions | None) -> Mapping[str, object]:
    """What undoes strict mode, by Handrail tool name; refuses another format's."""
    if definitions is None:
        return MappingProxyType({})
    if definitions.provider != provider:
        raise ConfigurationError(
            f"definitions for {definitions.provider!r} cannot parse {provider!r} calls",
        )
    return definitions.restore


def make_call(
    *,
    provider: str,
    call_id: object,
    name: object,
    arguments: object,
    raw: object,
    defect: str | None,
    restore: Mapping[str, object],
) -> ToolCall:
    """One wire call as a ToolCall: id verbatim, name mapped, strict-mode nulls undone.

    A call Handrail could not have asked for is kept, marked defective, so the gate
    refuses it and the transcript still answers its id: no id, a name that is not the
    wire form of any Handrail name, arguments that are neither text nor an object.
    """
    reasons = [defect]
    if not isinstance(call_id, str) or not call_id:
        reasons.append("the call has no id")
        call_id = call_id if isinstance(call_id, str) else ""
    wire = name if isinstance(name, str) else ""
    reasons.append(wire_name_defect(wire))
    if arguments is not None and not isinstance(arguments, str | Mapping):
        reasons.append("the arguments are neither JSON text nor an object")
        arguments = None
    found = next((reason for reason in reasons if reason), None)
    tool = name_from_wire(wire)
    restorer = restore.get(tool)
    if found is None and isinstance(arguments, str) and isinstance(restorer, Restorer):
        arguments = _restored(arguments, restorer)
    return ToolCall(
        id=call_id,
        name=tool,
        arguments=arguments,
        provider=provider,
        raw=raw,
        defect=found,
    )


def _restored(text: str, restorer: Restorer) -> str | dict[str, Any]:
    """The arguments with strict mode's nulls dropped; the text itself if none was sent.

    Text the gate would refuse at stage 1 (invalid JSON, duplicate keys, NaN, too
    large) is left as it is, so that the gate still sees it and refuses it.
    """
    try:
        parsed = parse_arguments(text, _RESTORE_LIMITS, write=False)
    except Refusal:
        return text
    restored = restorer.restore(parsed)
    return text if restored is parsed else restored


def is_complete_json(text: str) -> bool:
    """Whether streamed arguments closed: JSON text, or nothing at all (no arguments)."""
    if not text or text.isspace():
        return True
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def arguments_text(arguments: object) -> str:
    """A call's arguments as the JSON text OpenAI formats carry: text kept verbatim."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    if isinstance(arguments, bytes | bytearray | memoryview):
        try:
            return bytes(arguments).decode("utf-8")
        except UnicodeDecodeError:
            raise UntranslatableError("call arguments are bytes that are not UTF-8") from None
    if isinstance(arguments, Mapping):
        try:
            return json.dumps(
                plain_json(arguments),
                separators=(",", ":"),
                ensure_ascii=False,
                allow_nan=False,
            )
        except (TypeError, ValueError):
            raise UntranslatableError("call arguments are an object that is not JSON") from None
    raise UntranslatableError(f"call arguments of type {type(arguments).__name__}")


def is_error_content(content: str) -> bool:
    """Whether a result's text is an error envelope: a JSON object with status "error".

    OpenAI formats have no error flag on a tool result. The envelope the model reads
    says it instead, so `ToolResult.is_error` is read back from the content: from the
    body of its data block, or from plain envelope JSON (transcripts from before
    marking).
    """
    block = read_block(content)
    try:
        value = json.loads(content if block is None else block.body)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("status") == "error"


def text_of(content: object) -> str | None:
    """Message content as text: a string, or text parts joined; None stays None."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        raise UntranslatableError(f"message content of type {type(content).__name__}")
    parts: list[str] = []
    for part in content:
        kind = field(part, "type")
        text = field(part, "text")
        if kind not in _TEXT_PARTS or not isinstance(text, str):
            raise UntranslatableError(f"a content part of type {kind!r} has no neutral form")
        parts.append(text)
    return "".join(parts)


def check_transcript(transcript: Sequence[Turn], *, merges_assistant_turns: bool) -> None:
    """Refuse a transcript that would not come back unchanged from the wire.

    OpenAI formats cannot carry: an empty assistant or results turn; two results turns
    in a row (they read back as one); a result whose tool is not the tool its call
    named (results carry no name); `is_error` disagreeing with the envelope's status;
    a name that reads back as another. Where assistant turns are items in one list
    (Responses), a turn without text right after an assistant turn would merge into it.
    """
    TranscriptCheck(merges_assistant_turns=merges_assistant_turns).extend(transcript)


class TranscriptCheck:
    """`check_transcript` turn by turn: what it knows of the turns checked so far.

    Checking a transcript's turns in one `extend` or over several (in order) refuses
    exactly the same turn with the same error. After a refusal the check is spent: it
    must not be extended again.
    """

    __slots__ = ("_merges", "_names", "_previous")

    def __init__(self, *, merges_assistant_turns: bool) -> None:
        self._merges = merges_assistant_turns
        self._names: dict[str, str] = {}
        self._previous: Turn | None = None

    def extend(self, turns: Sequence[Turn]) -> None:
        """Check the turns that follow those checked so far; UntranslatableError if refused."""
        names = self._names
        previous = self._previous
        for turn in turns:
            if isinstance(turn, UserTurn):
                pass
            elif isinstance(turn, AssistantTurn):
                if turn.text is None and not turn.calls:
                    raise UntranslatableError("an assistant turn without text or calls")
                if self._merges and turn.text is None and isinstance(previous, AssistantTurn):
                    raise UntranslatableError("an assistant turn without text after another one")
                for call in turn.calls:
                    if name_from_wire(name_to_wire(call.name)) != call.name:
                        raise UntranslatableError(
                            f"the tool name {call.name!r} reads back as another"
                        )
                    names[call.id] = call.name
            elif isinstance(turn, ToolResultsTurn):
                if not turn.results or isinstance(previous, ToolResultsTurn):
                    raise UntranslatableError(
                        "an empty results turn, or two results turns in a row"
                    )
                for result in turn.results:
                    _check_result(result, names)
            else:  # pragma: no cover - closed by the Turn union
                assert_never(turn)
            previous = turn
            self._previous = turn


def _check_result(result: ToolResult, names: Mapping[str, str]) -> None:
    if names.get(result.call_id) != result.tool:
        raise UntranslatableError(
            f"the result for {result.call_id!r} names a tool no earlier call with that id named",
        )
    if result.is_error != is_error_content(result.content):
        raise UntranslatableError(
            f"the result for {result.call_id!r} has is_error={result.is_error}, "
            f"but its content is not an envelope saying so",
        )
