"""Validation stages 1-3: JSON syntax, JSON Schema, business rules; each its own code.

Stage 1 turns whatever the provider sent into a plain JSON object within limits.
Stage 2 checks it against the tool's schema and builds typed arguments. Stage 3 runs
the tool's business validators. None of them authorizes or executes anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handrail.errors import ErrorCode, Refusal, ToolSignal

if TYPE_CHECKING:
    from handrail.context import ToolContext
    from handrail.definition import BoundArguments, Tool

__all__ = ["ArgumentLimits", "check_business_rules", "parse_arguments", "validate_arguments"]

# I-JSON (RFC 7493): integers beyond this lose precision in most JSON consumers.
_SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ArgumentLimits:
    """Bounds on model-supplied arguments, checked before anything else looks at them."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_items: int = 10_000


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return obj


def _reject_constant(name: str) -> Any:  # noqa: ANN401 - json's hook signature
    msg = f"{name} is not valid JSON"
    raise ValueError(msg)


def _syntax(reason: str) -> Refusal:
    return Refusal(
        ErrorCode.INVALID_ARGUMENTS,
        f"The arguments are not acceptable JSON: {reason}.",
        stage="syntax",
        retryable=True,
        field_errors={"$": reason},
    )


def _check_shape(value: object, limits: ArgumentLimits) -> int:
    """Walk a decoded value: depth, item count, JSON types, finite numbers, safe integers.

    Returns an estimate of its size in bytes (used when the input came as an object).
    """
    items = 0
    size = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        items += 1
        if items > limits.max_items:
            raise _syntax(f"more than {limits.max_items} values")
        if isinstance(node, str):
            size += len(node) + 2
        elif isinstance(node, bool) or node is None:
            size += 4
        elif isinstance(node, int):
            if not -_SAFE_INTEGER <= node <= _SAFE_INTEGER:
                raise _syntax("an integer is outside the safe range of ±(2**53 - 1)")
            size += 8
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise _syntax("NaN and infinite numbers are not valid JSON")
            size += 8
        elif isinstance(node, Mapping | list | tuple):
            if depth > limits.max_depth:
                raise _syntax(f"nesting is deeper than {limits.max_depth} levels")
            if isinstance(node, Mapping):
                for key, child in node.items():
                    if not isinstance(key, str):
                        raise _syntax("object keys must be strings")
                    size += len(key) + 4
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in node)
        else:
            raise _syntax(f"a value of type {type(node).__name__} is not JSON")
    return size


def parse_arguments(raw: object, limits: ArgumentLimits) -> dict[str, Any]:
    """Stage 1: decode the provider's arguments into a JSON object, within limits.

    Accepts JSON text (str or UTF-8 bytes), an already decoded mapping, or nothing
    (an empty object). Refuses non-objects, duplicate keys, NaN and infinities,
    invalid UTF-8, oversized, too deep or too numerous input.
    """
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        if _check_shape(raw, limits) > limits.max_bytes:
            raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
        return dict(raw)
    if isinstance(raw, bytes | bytearray | memoryview):
        if len(raw) > limits.max_bytes:
            raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise _syntax("the arguments are not valid UTF-8") from None
    elif isinstance(raw, str):
        # Each character is at least one byte, so only long strings need encoding.
        if len(raw) > limits.max_bytes or (
            len(raw) * 4 > limits.max_bytes
            and len(raw.encode("utf-8", "surrogatepass")) > limits.max_bytes
        ):
            raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
        text = raw
    else:
        raise _syntax(f"arguments of type {type(raw).__name__} are not JSON")
    if not text.strip():
        return {}
    try:
        value = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_reject_constant)
    except _DuplicateKeyError as exc:
        raise _syntax(f"the key {exc.key[:64]!r} appears more than once") from None
    except RecursionError:
        raise _syntax(f"nesting is deeper than {limits.max_depth} levels") from None
    except ValueError as exc:
        # JSONDecodeError, the integer-digits limit, NaN/Infinity; the message names
        # only a position, never the input.
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise _syntax(f"invalid JSON ({reason[:120]})") from None
    if not isinstance(value, dict):
        raise _syntax(f"expected a JSON object, got {type(value).__name__}")
    _check_shape(value, limits)
    return value


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> BoundArguments:
    """Stage 2: check the arguments against the tool's schema; build typed arguments."""
    errors = tool.schema_errors(arguments)
    if errors:
        raise Refusal(
            ErrorCode.INVALID_ARGUMENTS,
            "The arguments do not match the tool's schema; correct the listed fields.",
            stage="schema",
            retryable=True,
            field_errors=errors,
        )
    return tool.bind(arguments)


async def check_business_rules(tool: Tool, bound: BoundArguments, ctx: ToolContext) -> None:
    """Stage 3: the tool's own validators (existence, state, cross-field rules)."""
    try:
        await tool.check(bound, ctx)
    except ToolSignal as signal:
        raise Refusal(
            signal.code,
            signal.message,
            stage="business",
            retryable=signal.retryable,
            candidates=getattr(signal, "candidates", ()),
        ) from None
