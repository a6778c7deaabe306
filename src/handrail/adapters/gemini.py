"""Gemini (Google Gen AI, REST camelCase) wire format, both ways.

Function declarations and tool config out, `functionCall` parts in (whole responses
and streams, read by `_gemini_calls`), `functionResponse` parts back, and whole
`contents`. It keeps provider ids verbatim, gives id-less calls stable ids of its own,
and never decides exposure.

Ids. Gemini usually sends calls without an `id` and matches results by name and order.
Handrail needs one id per call, so a call without one gets
`gemini_` + 24 hex digits of SHA-256 over the sorted, compact JSON of
`{turn, index, name, args}`: `turn` is the caller's `turn=` key or else the response's
`responseId`; `index` is the call's position among the response's calls. Parsing the
same response again gives the same ids, two identical calls of one response differ by
index, and identical calls of two turns differ by turn. With neither a `turn=` nor a
`responseId`, parsing refuses (ConfigurationError) rather than risk a collision; a
collision that still happens (a `turn` key reused) is caught by `CallIdLedger`.
Histories read by `from_wire` use the content's position as the turn. An id Gemini
sent is kept verbatim and sent back in the `functionResponse`; an id Handrail made is
not (Gemini never saw it). `to_wire` writes every id into both parts, so a transcript
survives the round trip exactly.

Finish reasons. `STOP` is normal, and so is a missing or unspecified reason in a whole
(non-streamed) response. Any other reason (`MAX_TOKENS`, `SAFETY`, `RECITATION`,
`MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`, `TOO_MANY_TOOL_CALLS`, ..., and
values this module does not know yet) marks every call of the response defective, so
the gate refuses them with INVALID_ARGUMENTS and never runs them. A stream that ends
without any finish reason was cut off, and its calls are defective too.

Results. A `functionResponse.response` must be a JSON object; it is
`{"output": text}` for a result and `{"error": text}` for a refusal or failure, as
Gemini documents those two keys, so `is_error` survives the trip. The text is the
envelope's data block (`shaping.marking`), verbatim. A result from before marking,
plain envelope JSON, is sent as the decoded object where decoding loses nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, assert_never

import pydantic_core

from handrail.adapters._common import plain_json, sendable
from handrail.adapters._gemini_calls import (
    ID_PREFIX,
    PROVIDER,
    GeminiStreamAssembler,
    Turnkey,
    calls_of_parts,
    finish_defect,
    first_candidate,
    parts_of,
    plain_object,
    text_or_none,
    wire_field,
)
from handrail.adapters._ids import id_from_wire, id_to_wire
from handrail.adapters._names import (
    name_from_wire,
    name_to_wire,
    to_wire_name,
)
from handrail.adapters._openapi import to_openapi
from handrail.adapters.base import (
    Definitions,
    IssueAction,
    StreamAssembler,
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
from handrail.text import escape_lone_surrogates

__all__ = ["GEMINI_NAME", "ID_PREFIX", "PROVIDER", "GeminiAdapter", "tool_definitions"]

GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
"""Gemini's rule for function names: a letter or '_', then letters, digits, '_.:-'."""

_USER_ROLES = frozenset({"user", "function", "tool"})


class GeminiAdapter:
    """The Gemini `generateContent` format, REST camelCase, checked against `google-genai`.

    `parameters_json_schema=False` (the default) sends each schema as `parameters`, the
    OpenAPI subset every Gemini model and Vertex AI take, converted by `_openapi` with
    every change reported. `True` sends the original JSON Schema as
    `parametersJsonSchema`, which newer models read with `$ref`, maps and recursion; no
    rewrite is made or reported, and Gemini may ignore keywords it does not support (the
    gate validates against the original either way). `marker` wraps each result in
    its data block; a fresh `DataMarker` by default.
    """

    provider: str = PROVIDER

    def __init__(
        self,
        *,
        parameters_json_schema: bool = False,
        marker: DataMarker | None = None,
    ) -> None:
        self._json_schema = parameters_json_schema
        self._marker = marker if marker is not None else DataMarker()

    def tool_definitions(self, specs: Sequence[ToolSpec]) -> Definitions:
        """One Tool with a function declaration per spec, or no tools for no specs.

        Raises UnsupportedSchemaError with every refused part of every schema, and
        ConfigurationError for a name Gemini would not take.
        """
        declarations: list[dict[str, Any]] = []
        issues = []
        for spec, wire in sendable(specs):
            if not GEMINI_NAME.fullmatch(wire):  # pragma: no cover - a second line of defence
                raise ConfigurationError(f"{wire!r} is not a valid Gemini function name")
            declaration: dict[str, Any] = {"name": wire, "description": spec.model_description}
            if self._json_schema:
                declaration["parametersJsonSchema"] = plain_json(spec.input_schema)
            else:
                parameters, found = to_openapi(spec.name, spec.input_schema)
                issues.extend(found)
                if parameters is not None:
                    declaration["parameters"] = parameters
            declarations.append(declaration)
        refused = [issue for issue in issues if issue.action is IssueAction.REFUSED]
        if refused:
            raise UnsupportedSchemaError(PROVIDER, refused)
        payload = [{"functionDeclarations": declarations}] if declarations else []
        return Definitions(provider=PROVIDER, payload=payload, issues=tuple(issues))

    def tool_choice(self, choice: ToolChoice) -> dict[str, Any]:
        """The request's `toolConfig`: AUTO, NONE, or ANY (with one allowed name for TOOL)."""
        match choice.mode:
            case ToolChoiceMode.AUTO:
                config: dict[str, Any] = {"mode": "AUTO"}
            case ToolChoiceMode.NONE:
                config = {"mode": "NONE"}
            case ToolChoiceMode.REQUIRED:
                config = {"mode": "ANY"}
            case ToolChoiceMode.TOOL:
                config = {"mode": "ANY", "allowedFunctionNames": [to_wire_name(str(choice.tool))]}
            case _:  # pragma: no cover - closed by the enum
                assert_never(choice.mode)
        return {"functionCallingConfig": config}

    def parse_calls(
        self,
        response: object,
        *,
        definitions: Definitions | None = None,
        turn: Turnkey | None = None,
    ) -> list[ToolCall]:
        """The calls of a `GenerateContentResponse`: SDK object, dict or JSON text.

        Reads the first candidate. `turn` keys the ids of calls sent without one (see
        the module docstring); without it, the response's `responseId` does.
        """
        _check_definitions(definitions)
        data = plain_object(response, "a GenerateContentResponse")
        candidate = first_candidate(data)
        if candidate is None:
            return []
        key = turn if turn is not None else text_or_none(wire_field(data, "responseId"))
        return calls_of_parts(parts_of(candidate), finish_defect(candidate, streamed=False), key)

    def stream(
        self,
        *,
        definitions: Definitions | None = None,
        turn: Turnkey | None = None,
    ) -> StreamAssembler:
        """An assembler for the chunks of one `streamGenerateContent` response."""
        _check_definitions(definitions)
        return GeminiStreamAssembler(turn)

    def render_results(
        self,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[dict[str, Any]]:
        """One user Content with a `functionResponse` per call, in call order.

        Results are matched by call id (`pair_results`), never by position; each
        response's value is the envelope's data block. No calls means no content at all.
        """
        turn = pair_results(calls, envelopes, marker=self._marker)
        if not turn.results:
            return []
        parts = [
            _response_part(result, _wire_name(call), _provider_id(call))
            for call, result in zip(calls, turn.results, strict=True)
        ]
        return [{"role": "user", "parts": parts}]

    def to_wire(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """Gemini `contents` for neutral turns, every call id written into its parts.

        Raises UntranslatableError for a turn with nothing in it (Gemini refuses empty
        parts) and for call arguments that are not a JSON object.
        """
        state = _GeminiWire()
        state.extend(transcript)
        return state.wire()

    def renderer(self, *, conversations: int = 16) -> TranscriptRenderer:
        """A renderer that gives what `to_wire` gives, rendering each new turn only once."""
        return TranscriptRenderer(_GeminiWire, conversations=conversations)

    def from_wire(self, messages: Sequence[object]) -> list[Turn]:
        """Neutral turns for Gemini `contents` (SDK objects or dicts).

        Text parts become user or assistant text, `functionCall` parts calls (ids kept,
        or made as for `parse_calls` keyed by the content's position) and
        `functionResponse` parts results. A result without an id answers the earliest
        unanswered call of the same name in the model turn before it. Thought parts and
        thought signatures on text are left out (those on calls travel in `raw`).
        Raises UntranslatableError for other parts (images, code execution), unknown
        roles and results that answer no call.
        """
        turns: list[Turn] = []
        pending: list[ToolCall] = []
        for index, message in enumerate(messages):
            data = plain_object(message, "a Content")
            role = wire_field(data, "role") or "user"
            parts = parts_of(data)
            if role == "model":
                turn = _assistant_turn(parts, f"contents[{index}]")
                pending = list(turn.calls)
                turns.append(turn)
            elif role in _USER_ROLES:
                turns.extend(_user_turns(parts, pending))
            else:
                raise UntranslatableError(f"contents[{index}] has the unknown role {role!r}")
        return turns


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list for specs already exposed, with each schema as JSON Schema.

    The list alone cannot carry rewrite reports, so this export sends every schema
    unchanged as `parametersJsonSchema`; use `GeminiAdapter().tool_definitions` for
    the OpenAPI-subset `parameters` and the report of what was rewritten.
    """
    return GeminiAdapter(parameters_json_schema=True).tool_definitions(specs).payload


# --- results and transcripts out -------------------------------------------------------------


class _GeminiWire:
    """A transcript's contents so far, and the wire name of each call (`WireState`)."""

    __slots__ = ("_contents", "_wire_names")

    def __init__(self) -> None:
        self._contents: list[dict[str, Any]] = []
        self._wire_names: dict[str, str] = {}

    def extend(self, turns: Sequence[Turn]) -> None:
        contents, wire_names = self._contents, self._wire_names
        for turn in turns:
            if isinstance(turn, UserTurn):
                contents.append({"role": "user", "parts": [{"text": turn.text}]})
            elif isinstance(turn, AssistantTurn):
                parts: list[dict[str, Any]] = []
                if turn.text is not None:
                    parts.append({"text": turn.text})
                for call in turn.calls:
                    wire_names[call.id] = _wire_name(call)
                    parts.append(_call_part(call, wire_names[call.id]))
                if not parts:
                    raise UntranslatableError("an assistant turn without text or calls")
                contents.append({"role": "model", "parts": parts})
            elif isinstance(turn, ToolResultsTurn):
                if not turn.results:
                    raise UntranslatableError("a tool results turn without results")
                parts = [
                    _response_part(
                        result,
                        wire_names.get(result.call_id) or name_to_wire(result.tool),
                        id_to_wire(result.call_id),
                    )
                    for result in turn.results
                ]
                contents.append({"role": "user", "parts": parts})
            else:  # pragma: no cover - closed by the Turn union
                assert_never(turn)

    def wire(self) -> list[dict[str, Any]]:
        return list(self._contents)


def _response_part(result: ToolResult, wire_name: str, call_id: str | None) -> dict[str, Any]:
    """A `functionResponse` part: the envelope under "output", or "error" if it is one."""
    response = {"error" if result.is_error else "output": _content_value(result.content)}
    function_response: dict[str, Any] = {"name": wire_name, "response": response}
    if call_id is not None:
        function_response["id"] = call_id
    return {"functionResponse": function_response}


def _content_value(text: str) -> object:
    """The decoded envelope object, when decoding loses nothing; else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and pydantic_core.to_json(value).decode() == text:
        return value
    return text


def _content_text(value: object) -> str:
    """The inverse of `_content_value`: the text a result's value was made from."""
    return value if isinstance(value, str) else pydantic_core.to_json(value).decode()


def _call_part(call: ToolCall, wire_name: str) -> dict[str, Any]:
    """A `functionCall` part, with the call's id and any thought signature Gemini sent."""
    part: dict[str, Any] = {
        "functionCall": {
            "name": wire_name,
            "args": _arguments_object(call),
            "id": id_to_wire(call.id),
        },
    }
    raw = _gemini_raw(call)
    signature = wire_field(raw, "thoughtSignature") if raw is not None else None
    if isinstance(signature, str):
        part["thoughtSignature"] = signature
    return part


def _arguments_object(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the JSON object Gemini's `args` must be."""
    arguments = call.arguments
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(plain_json(arguments))
    try:
        text = arguments if isinstance(arguments, str) else bytes(arguments).decode()
        value = json.loads(text, object_pairs_hook=_unique_keys) if text.strip() else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UntranslatableError(f"call {call.id[:64]!r} has arguments that are not an object")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _gemini_raw(call: ToolCall) -> Mapping[str, Any] | None:
    """The Gemini part a call was read from, if it still describes this call."""
    if call.provider != PROVIDER or not isinstance(call.raw, Mapping):
        return None
    function_call = wire_field(call.raw, "functionCall")
    name = wire_field(function_call, "name") if isinstance(function_call, Mapping) else None
    return call.raw if isinstance(name, str) and name_from_wire(name) == call.name else None


def _wire_name(call: ToolCall) -> str:
    """The name the model wrote for a call read from Gemini; else the mapped name."""
    raw = _gemini_raw(call)
    if raw is not None:
        # No request body can hold a lone surrogate: such a name (never a tool's) escaped.
        return escape_lone_surrogates(str(wire_field(wire_field(raw, "functionCall"), "name")))
    return name_to_wire(call.name)


def _provider_id(call: ToolCall) -> str | None:
    """The call's id as written on the wire if its provider made it; None if derived."""
    if call.provider != PROVIDER:
        return id_to_wire(call.id)
    raw = _gemini_raw(call)
    sent = wire_field(wire_field(raw, "functionCall"), "id") if raw is not None else None
    if not isinstance(sent, str) or call.id not in {sent, id_from_wire(sent)}:
        return None
    return id_to_wire(call.id)


def _assistant_turn(parts: Sequence[Mapping[str, Any]], key: str) -> AssistantTurn:
    texts: list[str] = []
    call_parts: list[Mapping[str, Any]] = []
    for part in parts:
        if wire_field(part, "thought"):
            continue
        if wire_field(part, "functionCall") is not None:
            args = wire_field(wire_field(part, "functionCall"), "args")
            if args is not None and not isinstance(args, Mapping):
                raise UntranslatableError(f"{key} has a call whose args are not an object")
            call_parts.append(part)
        elif isinstance(wire_field(part, "text"), str):
            texts.append(wire_field(part, "text"))
        else:
            raise UntranslatableError(f"{key} has a part with no neutral form: {sorted(part)}")
    return AssistantTurn(
        text="".join(texts) if texts else None,
        calls=tuple(
            replace(c, id=id_from_wire(c.id)) for c in calls_of_parts(call_parts, None, key)
        ),
    )


def _user_turns(parts: Sequence[Mapping[str, Any]], pending: list[ToolCall]) -> list[Turn]:
    """Runs of text parts as user turns and runs of responses as results turns."""
    turns: list[Turn] = []
    texts: list[str] = []
    results: list[ToolResult] = []
    for part in parts:
        function_response = wire_field(part, "functionResponse")
        if isinstance(function_response, Mapping):
            if texts:
                turns.append(UserTurn(text="".join(texts)))
                texts = []
            results.append(_result(function_response, pending))
        elif isinstance(wire_field(part, "text"), str):
            if results:
                turns.append(ToolResultsTurn(results=tuple(results)))
                results = []
            texts.append(wire_field(part, "text"))
        else:
            raise UntranslatableError(f"a user part with no neutral form: {sorted(part)}")
    if texts:
        turns.append(UserTurn(text="".join(texts)))
    if results:
        turns.append(ToolResultsTurn(results=tuple(results)))
    return turns


def _result(function_response: Mapping[str, Any], pending: list[ToolCall]) -> ToolResult:
    """One `functionResponse` as a result, matched to its call by id, else by name."""
    wire = text_or_none(wire_field(function_response, "name")) or ""
    call_id = text_or_none(wire_field(function_response, "id"))
    if call_id is not None:
        call_id = id_from_wire(call_id)
    if call_id is None:
        match = next((c for c in pending if _wire_name(c) == wire), None)
        if match is None:
            raise UntranslatableError(f"a result for {wire[:64]!r} answers no call before it")
        pending.remove(match)
        call_id = match.id
    else:
        pending[:] = [c for c in pending if c.id != call_id]
    response = wire_field(function_response, "response")
    response = response if isinstance(response, Mapping) else {}
    if len(response) == 1 and ("output" in response or "error" in response):
        [(key, value)] = response.items()
        return ToolResult(
            call_id=call_id,
            tool=name_from_wire(wire),
            content=_content_text(value),
            is_error=key == "error",
        )
    return ToolResult(
        call_id=call_id,
        tool=name_from_wire(wire),
        content=_content_text(dict(response)),
        is_error="error" in response,
    )


def _check_definitions(definitions: Definitions | None) -> None:
    if definitions is not None and definitions.provider != PROVIDER:
        raise ConfigurationError(
            f"definitions made for {definitions.provider!r} cannot parse Gemini calls",
        )
