"""The scripted model client and the cassettes it replays.

`ScriptedModelClient` plays recorded replies (or a script of `ModelTurn`s) back, one
per request; a cassette is those replies as JSON, which runs also keep for replay. It
is never a real model, never runs a call and never makes a reply up.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from handrail.adapters._common import plain_json
from handrail.calls import ToolCall
from handrail.errors import ConfigurationError
from handrail.loop.models._protocol import (
    ModelReply,
    ModelRequest,
    TextDelta,
    Usage,
    check_timeout,
)
from handrail.testing import ModelTurn, ScriptExhaustedError

__all__ = [
    "SCRIPTED_MODEL",
    "CassetteError",
    "ScriptedModelClient",
    "ScriptedStep",
    "cassette_items",
    "load_cassette",
    "parse_cassette",
    "record_cassette",
]


class CassetteError(ConfigurationError):
    """A cassette that is not a JSON list of replies in the recorded form."""


# --- scripted ------------------------------------------------------------------------------

SCRIPTED_MODEL = "scripted-model"

ScriptedStep = ModelReply | ModelTurn | Callable[[ModelRequest], ModelReply | ModelTurn]
"""A recorded reply, a `handrail.testing.ModelTurn`, or a function of the request."""


class ScriptedModelClient:
    """A stand-in for a model that replays a script or a cassette, reply by reply.

    It is never a real model and says so in its `name`. Each request gets the next
    step; a step may be a function of the request, to script a repair. The requests
    it received are kept in `requests` unless `record_requests` is False. `stream`
    plays the same reply with its text in deltas of at most `delta_chars` characters.
    """

    name = SCRIPTED_MODEL

    def __init__(
        self,
        steps: Sequence[ScriptedStep],
        *,
        record_requests: bool = True,
        delta_chars: int = 16,
    ) -> None:
        if delta_chars < 1:
            raise ConfigurationError("delta_chars must be positive")
        self._delta_chars = delta_chars
        self._steps = tuple(steps)
        self._position = 0
        self._record = record_requests
        self._requests: list[ModelRequest] = []

    @classmethod
    def from_cassette(
        cls, path: str | Path, *, record_requests: bool = True
    ) -> ScriptedModelClient:
        """A client replaying the cassette at `path` (see `load_cassette`)."""
        return cls(load_cassette(path), record_requests=record_requests)

    @property
    def finished(self) -> bool:
        """True when every step has been played."""
        return self._position >= len(self._steps)

    @property
    def requests(self) -> tuple[ModelRequest, ...]:
        """The requests received so far, in order."""
        return tuple(self._requests)

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        """The next scripted reply; raises ScriptExhaustedError past the end."""
        check_timeout(timeout)
        if self._record:
            self._requests.append(request)
        if self.finished:
            raise ScriptExhaustedError(f"the script has only {len(self._steps)} replies")
        step = self._steps[self._position]
        self._position += 1
        if callable(step):
            step = step(request)
        if isinstance(step, ModelTurn):
            return ModelReply(
                calls=step.calls,
                text=step.text,
                finish_reason="tool_calls" if step.calls else "stop",
                model=SCRIPTED_MODEL,
            )
        return step

    async def stream(
        self, request: ModelRequest, *, timeout: float
    ) -> AsyncIterator[TextDelta | ModelReply]:
        """The next scripted reply, its text first in deltas; the reply itself last."""
        reply = await self.complete(request, timeout=timeout)
        text = reply.text or ""
        for start in range(0, len(text), self._delta_chars):
            yield TextDelta(text=text[start : start + self._delta_chars])
        yield reply


# --- cassettes -----------------------------------------------------------------------------

_REPLY_KEYS = frozenset({"calls", "text", "usage", "finish_reason", "model"})
_CALL_KEYS = frozenset({"id", "name", "arguments", "arguments_base64", "provider", "defect"})
_USAGE_KEYS = frozenset({"input_tokens", "output_tokens"})


def cassette_items(replies: Sequence[ModelReply]) -> list[dict[str, Any]]:
    """The replies as the JSON objects of a cassette, not yet encoded."""
    return [_reply_json(r) for r in replies]


def record_cassette(replies: Sequence[ModelReply]) -> str:
    """The replies as a cassette: a JSON list, one object per reply, in order.

    Each reply keeps its calls (id, name, arguments, provider, defect), text, usage,
    finish reason and model; `raw` is not recorded. Bytes arguments are kept as base64.
    Raises CassetteError for arguments that are not JSON.
    """
    try:
        return json.dumps(cassette_items(replies), indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CassetteError("the replies hold arguments that are not JSON") from exc


def load_cassette(path: str | Path) -> tuple[ModelReply, ...]:
    """The replies of the cassette file at `path`; raises CassetteError if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CassetteError(f"cannot read the cassette {str(path)!r}") from exc
    return parse_cassette(text)


def parse_cassette(text: str) -> tuple[ModelReply, ...]:
    """The replies of a cassette's JSON text; raises CassetteError for any other shape."""
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise CassetteError("a cassette is JSON text") from exc
    if not isinstance(document, list):
        raise CassetteError("a cassette is a JSON list of replies")
    return tuple(_reply_of(index, entry) for index, entry in enumerate(document))


def _no_constant(name: str) -> object:
    raise ValueError(name)


def _reply_json(reply: ModelReply) -> dict[str, Any]:
    return {
        "calls": [_call_json(call) for call in reply.calls],
        "text": reply.text,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
        },
        "finish_reason": reply.finish_reason,
        "model": reply.model,
    }


def _call_json(call: ToolCall) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": call.id, "name": call.name}
    if isinstance(call.arguments, bytes):
        entry["arguments_base64"] = base64.b64encode(call.arguments).decode("ascii")
    else:
        entry["arguments"] = plain_json(call.arguments)
    entry["provider"] = call.provider
    entry["defect"] = call.defect
    return entry


def _object(where: str, value: object, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CassetteError(f"{where} is not a JSON object")
    unknown = set(value) - keys
    if unknown:
        raise CassetteError(f"{where} has unknown keys {sorted(unknown)}")
    return value


def _text(where: str, value: object, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CassetteError(f"{where} is not text")
    return value


def _count(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CassetteError(f"{where} is not a token count")
    return value


def _reply_of(index: int, entry: object) -> ModelReply:
    where = f"reply {index}"
    reply = _object(where, entry, _REPLY_KEYS)
    calls = reply.get("calls", [])
    if not isinstance(calls, list):
        raise CassetteError(f"{where}: calls is not a list")
    usage = _object(f"{where}: usage", reply.get("usage", {}), _USAGE_KEYS)
    return ModelReply(
        calls=tuple(_call_of(f"{where}, call {n}", call) for n, call in enumerate(calls)),
        text=_text(f"{where}: text", reply.get("text"), optional=True),
        usage=Usage(
            input_tokens=_count(f"{where}: input_tokens", usage.get("input_tokens", 0)),
            output_tokens=_count(f"{where}: output_tokens", usage.get("output_tokens", 0)),
        ),
        finish_reason=_text(f"{where}: finish_reason", reply.get("finish_reason"), optional=True),
        model=str(_text(f"{where}: model", reply.get("model", SCRIPTED_MODEL), optional=False)),
        raw=entry,
    )


def _call_of(where: str, value: object) -> ToolCall:
    call = _object(where, value, _CALL_KEYS)
    arguments: str | bytes | dict[str, Any] | None
    if "arguments_base64" in call:
        if "arguments" in call:
            raise CassetteError(f"{where} has both arguments and arguments_base64")
        encoded = _text(f"{where}: arguments_base64", call["arguments_base64"], optional=False)
        try:
            arguments = base64.b64decode(str(encoded), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CassetteError(f"{where}: arguments_base64 is not base64") from exc
    else:
        arguments = call.get("arguments")
        if arguments is not None and not isinstance(arguments, str | dict):
            raise CassetteError(f"{where}: arguments are neither text nor an object")
    return ToolCall(
        id=str(_text(f"{where}: id", call.get("id"), optional=False)),
        name=str(_text(f"{where}: name", call.get("name"), optional=False)),
        arguments=arguments,
        provider=str(_text(f"{where}: provider", call.get("provider", "unknown"), optional=False)),
        defect=_text(f"{where}: defect", call.get("defect"), optional=True),
    )
