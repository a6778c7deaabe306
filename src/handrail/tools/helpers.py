"""Deterministic helpers: exact answers a model should not estimate (hashes, counts, JSON).

Owns `helper_tools`: `sha256_text`, `count_text` and `json_canonical`, pure functions of
bounded text, read-only and L0. They touch no file, network or clock, so the same
arguments always give the same result.
"""

# No `from __future__ import annotations`: the tools' annotations close over `max_chars`,
# so they must be evaluated where they are written.

import hashlib
import json
import re
from decimal import Decimal
from typing import Annotated, Any

import rfc8785
from pydantic import Field

from handrail.canonical import canonical_json, sha256_hex
from handrail.declare.definition import Tool, tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, InvalidArgument
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel, ToolHints

__all__ = ["helper_tools"]

_MAX_CHARS = 1_000_000
_MAX_JSON_DEPTH = 64
_MAX_SAFE_INTEGER = 2**53 - 1
_NEWLINES = re.compile(r"\r\n|\r|\n")
_COMPUTED = ResultPolicy(trust=Trust.INTERNAL)
_HINTS = ToolHints(read_only=True, idempotent=True, open_world=False)


def _line_count(text: str) -> int:
    """Lines as an editor shows them: LF, CRLF or CR ends one; a last line may not."""
    if not text:
        return 0
    ends = len(_NEWLINES.findall(text))
    return ends if _NEWLINES.fullmatch(text[-1:]) else ends + 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise InvalidArgument("The JSON has an object with a repeated key; RFC 8785 forbids that.")
    return dict(pairs)


def _number(text: str) -> int | float:
    """A JSON integer as RFC 8785 reads numbers: a double, refused if that changes its value.

    9007199254740993 would silently become ...992; 21915272379220590 is written as such.
    """
    value = int(text)
    if abs(value) <= _MAX_SAFE_INTEGER:
        return value
    try:
        as_double = float(value)
    except OverflowError:
        raise InvalidArgument("An integer is too large for a JSON number (a double).") from None
    if Decimal(canonical_json(as_double).decode("ascii")) != value:
        raise InvalidArgument(
            f"The integer {text[:24]}… is not exactly a JSON number (a double); write it as "
            f"a string to keep every digit.",
        )
    return as_double


def _no_constant(name: str) -> object:
    raise InvalidArgument(f"{name} is not a JSON number.")


def _depth(value: object) -> int:
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, level + 1) for child in item)
    return deepest


def _parse_json(text: str) -> object:
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=_number,
        )
    except RecursionError:
        raise InvalidArgument(f"The JSON nests deeper than {_MAX_JSON_DEPTH} levels.") from None
    except ValueError as exc:
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else "a number is too long"
        raise InvalidArgument(f"The text is not valid JSON ({message[:120]}).") from None
    if _depth(value) > _MAX_JSON_DEPTH:
        raise InvalidArgument(f"The JSON nests deeper than {_MAX_JSON_DEPTH} levels.")
    return value


def helper_tools(*, namespace: str | None = "util", max_chars: int = 100_000) -> list[Tool]:
    """`sha256_text`, `count_text` and `json_canonical`; inputs up to `max_chars` characters."""
    if not 1 <= max_chars <= _MAX_CHARS:
        raise ConfigurationError(f"max_chars must be between 1 and {_MAX_CHARS}")

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace=namespace, results=_COMPUTED, hints=_HINTS)
    async def sha256_text(
        text: Annotated[str, Field(max_length=max_chars, description="The text.")],
    ) -> dict[str, object]:
        """The SHA-256 of a text's UTF-8 bytes, as 64 lower-case hex digits.

        Exact: use it instead of working a hash out yourself.
        """
        data = text.encode("utf-8")
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace=namespace, results=_COMPUTED, hints=_HINTS)
    async def count_text(
        text: Annotated[str, Field(max_length=max_chars, description="The text.")],
    ) -> dict[str, object]:
        """Exact counts of a text: characters (code points), UTF-8 bytes, lines and words.

        A line ends at a newline (LF, CRLF or CR); a last line without one still counts.
        Words are runs of characters other than whitespace.
        """
        return {
            "chars": len(text),
            "bytes": len(text.encode("utf-8")),
            "lines": _line_count(text),
            "words": len(text.split()),
        }

    @tool(
        risk=RiskLevel.L0_PUBLIC_READ,
        namespace=namespace,
        results=ResultPolicy(trust=Trust.UNTRUSTED),
        hints=_HINTS,
    )
    async def json_canonical(
        json_text: Annotated[
            str, Field(max_length=max_chars, description="A JSON document, as text.")
        ],
    ) -> dict[str, object]:
        """A JSON document in RFC 8785 canonical form (sorted keys, no spaces), with its SHA-256.

        Two documents with the same content give the same text and hash. Refused: invalid
        JSON, repeated keys, NaN or infinities, and integers beyond ±2**53.
        """
        value = _parse_json(json_text)
        try:
            canonical = canonical_json(value)
        except rfc8785.CanonicalizationError:
            raise InvalidArgument(
                "The JSON holds a value canonical JSON cannot represent exactly (an integer "
                "beyond ±2**53, or text that is not Unicode).",
            ) from None
        return {
            "canonical": canonical.decode("utf-8"),
            "sha256": sha256_hex(canonical),
            "bytes": len(canonical),
        }

    return [sha256_text, count_text, json_canonical]
