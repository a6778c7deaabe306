"""Gemini, the reading half: `functionCall` parts of responses and streams to ToolCalls.

Reads whole responses and stream chunks (SDK objects, dicts or JSON text), keeps the
ids Gemini sent, derives stable ones for calls sent without (the scheme is in the
docstring of `handrail.adapters.gemini`), and marks the calls of a response that did
not finish normally as defective. It never validates, authorizes or runs a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from handrail.adapters._names import name_from_wire, wire_name_defect
from handrail.adapters.base import UntranslatableError
from handrail.calls import ToolCall
from handrail.canonical import sha256_hex
from handrail.errors import ConfigurationError

__all__ = [
    "ID_PREFIX",
    "PROVIDER",
    "GeminiStreamAssembler",
    "Turnkey",
    "calls_of_parts",
    "finish_defect",
    "first_candidate",
    "parts_of",
    "plain_object",
    "text_or_none",
    "wire_field",
]

PROVIDER = "gemini"

ID_PREFIX = "gemini_"
"""Starts every id Handrail gives a call that Gemini sent without one."""

_NORMAL_FINISH = frozenset({"STOP"})
_UNSET_FINISH = frozenset({"", "FINISH_REASON_UNSPECIFIED"})
_CAMEL_HUMP = re.compile(r"(?<!^)(?=[A-Z])")

Turnkey = str | int
"""What keys the ids of calls sent without one: the caller's `turn=` or a `responseId`."""


class GeminiStreamAssembler:
    """Collects the parts of one streamed response; Gemini streams whole calls."""

    def __init__(self, turn: Turnkey | None) -> None:
        self._turn = turn
        self._response_id: str | None = None
        self._parts: list[Mapping[str, Any]] = []
        self._candidate: dict[str, Any] = {}

    def feed(self, event: object) -> None:
        """Take the next chunk: an SDK `GenerateContentResponse`, a dict or JSON text."""
        data = plain_object(event, "a GenerateContentResponse chunk")
        self._response_id = self._response_id or text_or_none(wire_field(data, "responseId"))
        candidate = first_candidate(data)
        if candidate is None:
            return
        self._parts.extend(parts_of(candidate))
        reason = wire_field(candidate, "finishReason")
        if reason is not None:
            self._candidate["finishReason"] = reason

    def finish(self) -> list[ToolCall]:
        """Every call of the stream, in order; all defective if it did not end normally."""
        key = self._turn if self._turn is not None else self._response_id
        return calls_of_parts(self._parts, finish_defect(self._candidate, streamed=True), key)


# --- calls in ----------------------------------------------------------------------------------


def calls_of_parts(
    parts: Sequence[Mapping[str, Any]],
    defect: str | None,
    key: Turnkey | None,
) -> list[ToolCall]:
    """The `functionCall` parts as ToolCalls, ids kept or derived from `key`."""
    calls: list[ToolCall] = []
    for part in parts:
        function_call = wire_field(part, "functionCall")
        if not isinstance(function_call, Mapping):
            continue
        name = text_or_none(wire_field(function_call, "name")) or ""
        args = wire_field(function_call, "args")
        call_id = text_or_none(wire_field(function_call, "id"))
        if call_id is None:
            if key is None:
                raise ConfigurationError(
                    "a Gemini call without an id needs a turn key: pass turn= or keep the "
                    "response's responseId",
                )
            call_id = _derived_id(key, len(calls), name, args)
        calls.append(
            ToolCall(
                id=call_id,
                name=name_from_wire(name),
                arguments=_arguments_in(args),
                provider=PROVIDER,
                raw=dict(part),
                defect=defect or _fragment_defect(function_call) or wire_name_defect(name),
            ),
        )
    return calls


def _arguments_in(args: object) -> str | dict[str, Any]:
    """Gemini's `args` for the gate: absent is `{}`, a non-object goes on as JSON text."""
    if args is None:
        return {}
    if isinstance(args, Mapping):
        return dict(args)
    # Not an object: the gate's stage 1 refuses it with INVALID_ARGUMENTS.
    return json.dumps(args)


def _fragment_defect(function_call: Mapping[str, Any]) -> str | None:
    """Why a call streamed in argument fragments (Vertex `partialArgs`) must not run."""
    fragmented = wire_field(function_call, "partialArgs") is not None
    if fragmented or wire_field(function_call, "willContinue"):
        return "the call's arguments came in fragments, which Handrail does not assemble"
    return None


def _derived_id(key: Turnkey, index: int, name: str, args: object) -> str:
    """A stable id for a call Gemini sent without one (see `handrail.adapters.gemini`)."""
    material = {"turn": key, "index": index, "name": name, "args": args}
    # Sorted, compact JSON is stable for the same decoded response, which is all an id
    # needs; it is also C-fast, where the JCS form would triple this adapter's cost.
    data = json.dumps(material, sort_keys=True, separators=(",", ":"), default=repr)
    return ID_PREFIX + sha256_hex(data.encode("utf-8", "surrogatepass"))[:24]


def finish_defect(candidate: Mapping[str, Any], *, streamed: bool) -> str | None:
    """Why every call of a candidate must not run, from its finish reason; None if fine."""
    reason = wire_field(candidate, "finishReason")
    if reason in _NORMAL_FINISH:
        return None
    if reason is None or reason in _UNSET_FINISH:
        return "the stream ended before Gemini said why it stopped" if streamed else None
    return f"the response stopped with finish reason {str(reason)[:40]!r}, not STOP"


def first_candidate(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The candidate with index 0 (the first), which tool calls are read from."""
    candidates = wire_field(data, "candidates")
    if not isinstance(candidates, list):
        return None
    for candidate in candidates:
        if isinstance(candidate, Mapping) and not wire_field(candidate, "index"):
            return candidate
    return None


def parts_of(holder: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The parts of a Content, or of a candidate's content."""
    content = wire_field(holder, "content") if "parts" not in holder else holder
    parts = wire_field(content, "parts") if isinstance(content, Mapping) else None
    return [part for part in parts if isinstance(part, Mapping)] if isinstance(parts, list) else []


# --- plain data ------------------------------------------------------------------------------


def plain_object(value: object, what: str) -> Mapping[str, Any]:
    """A JSON object from an SDK model (camelCase), a mapping or JSON text.

    Raises UntranslatableError for anything else: it has no neutral form.
    """
    if isinstance(value, pydantic.BaseModel):
        dumped: Any = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(value, str | bytes | bytearray):
        try:
            dumped = json.loads(value)
        except ValueError:
            raise UntranslatableError(f"expected {what}, got text that is not JSON") from None
    else:
        dumped = value
    if not isinstance(dumped, Mapping):
        raise UntranslatableError(f"expected {what}, got {type(dumped).__name__}")
    return dumped


def wire_field(data: object, camel: str) -> Any:  # noqa: ANN401 - a JSON value of any shape
    """A field by its REST (camelCase) name, or by the SDK's snake_case one."""
    if not isinstance(data, Mapping):
        return None
    if camel in data:
        return data[camel]
    return data.get(_CAMEL_HUMP.sub("_", camel).lower())


def text_or_none(value: object) -> str | None:
    """The value if it is non-empty text; else None."""
    return value if isinstance(value, str) and value else None
