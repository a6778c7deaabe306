"""Stage 1, JSON syntax: whatever the provider sent, as a plain JSON object within limits.

Refuses (INVALID_ARGUMENTS) text that is not an object, duplicate keys, NaN and
infinities, numbers no JSON consumer reads alike, lone surrogates, and documents
beyond the size, depth and count limits, before anything else looks at them; in a
write's arguments also floats a plan cannot keep exactly. Also the refusal of a call
an adapter marked as defective (a truncated stream). Never looks at a tool's schema.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.paths import json_path

__all__ = ["ArgumentLimits", "inexact_in_a_plan", "parse_arguments", "refuse_defect"]


# I-JSON (RFC 7493): integers beyond this lose precision in most JSON consumers.
_SAFE_INTEGER = 2**53 - 1
# A lone surrogate is not a Unicode scalar value: it cannot be written as UTF-8, so it
# would break every store, log and wire format downstream (I-JSON forbids it too).
_SURROGATE = re.compile("[\ud800-\udfff]")
# Sixteen digits in a row can spell an integer beyond the safe range, and a three-digit
# exponent a float that overflows to infinity.
_RISKY_NUMBER = re.compile(r"\d{16}|[eE][+-]?\d{3}")
# A float of magnitude 2**53 or more is written with sixteen integer digits or an exponent.
_LARGE_FLOAT = re.compile(r"\d{16}|\d[eE]")
# From 2**53 on every float is a whole number; from 1e21 on RFC 8785 writes it with an
# exponent, which decodes as a float again.
_WHOLE_FLOAT = 2.0**53
_EXPONENT_FORM = 1e21
_MAX_FIELD_ERRORS = 20
_NOT_IN_A_PLAN = (
    "is a whole number of magnitude 2**53 or more, which a write cannot keep exactly; "
    "send a smaller number, or a string where the schema allows one"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ArgumentLimits:
    """Bounds on model-supplied arguments, checked before anything else looks at them."""

    max_bytes: int = 1 << 20
    max_depth: int = 32
    max_items: int = 10_000

    def __post_init__(self) -> None:
        if min(self.max_bytes, self.max_depth, self.max_items) < 1:
            msg = "argument limits must be positive"
            raise ConfigurationError(msg)


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


class _ConstantError(ValueError):
    pass


def _reject_constant(name: str) -> Any:  # noqa: ANN401 - json's hook signature
    msg = f"{name} is not valid JSON"
    raise _ConstantError(msg)


# Built once: json.loads with hooks would build a new decoder on every call.
_DECODER = json.JSONDecoder(object_pairs_hook=_object_pairs, parse_constant=_reject_constant)


# Without hooks the decoder builds objects in C: the quick path of small flat objects.
_PLAIN_DECODER = json.JSONDecoder()
_QUICK_MAX_CHARS = 2048
_QUICK_MAX_MEMBERS = 32


def _quick(text: str, limits: ArgumentLimits, *, write: bool) -> dict[str, Any] | None:  # noqa: PLR0911 - one pass, no calls
    r"""A small flat object decoded and checked without the hooks, or None.

    Only for text with one `{` and no `[`: a flat object of scalars. No key is
    repeated when its members and the `:` in its decoded strings are as many as the
    `:` in the text (each member has one; a repeated member's strings are gone from
    the decoded object, so they cannot make up for it; and without a `\u` escape a
    decoded `:` was one in the text). Each scalar is checked as `_check_shape` would.
    None means "not proven here": the full path decides, and gives any refusal.

    Text that starts with its `{` and has no NaN or Infinity is refused here when it is
    not JSON: the hooks act only on a finished object or on those constants, so the
    full path would fail at the same place, with the same words.
    """
    size = len(text)
    if size > _QUICK_MAX_CHARS or text.count("{") != 1 or "[" in text:
        return None
    try:
        value, end = _PLAIN_DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        if text[0] == "{" and "NaN" not in text and "Infinity" not in text:
            raise _syntax(f"invalid JSON ({exc.msg[:120]})") from None
        return None
    except ValueError:
        return None
    if end != size or type(value) is not dict:
        return None
    members = len(value)
    if members > _QUICK_MAX_MEMBERS or members + 1 > limits.max_items:
        return None
    colons = text.count(":") - members
    if colons and "\\u" in text:
        return None
    # The members, checked as `_check_shape` would check them.
    for key, member in value.items():
        if not (key.isascii() or _is_text(key)):
            return None
        kind = type(member)
        if colons:
            colons -= key.count(":")
        if kind is str:
            if not (member.isascii() or _is_text(member)):
                return None
            if colons:
                colons -= member.count(":")
        elif kind is int:
            if not -_SAFE_INTEGER <= member <= _SAFE_INTEGER:
                return None
        elif kind is float:
            if not math.isfinite(member) or (write and inexact_in_a_plan(member)):
                return None
        elif member is not None and kind is not bool:
            return None
    return value if colons == 0 else None


def _is_text(value: str) -> bool:
    return value.isascii() or _SURROGATE.search(value) is None


def _syntax(reason: str) -> Refusal:
    return Refusal(
        ErrorCode.INVALID_ARGUMENTS,
        f"The arguments are not acceptable JSON: {reason}.",
        stage="syntax",
        retryable=True,
        field_errors={"$": reason},
    )


_EXACT_KIND: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "constant",
    type(None): "constant",
    dict: "object",
    list: "array",
}


def _kind(node: object) -> str:
    """The JSON kind of a decoded value; exact types first, since this runs per value."""
    kind = _EXACT_KIND.get(type(node))
    if kind is not None:
        return kind
    if isinstance(node, bool):
        return "constant"
    for cls, name in ((str, "string"), (int, "integer"), (float, "number")):
        if isinstance(node, cls):
            return name
    if isinstance(node, Mapping):
        return "object"
    if isinstance(node, list | tuple):
        return "array"
    raise _syntax(f"a value of type {type(node).__name__} is not JSON")


def _text_within_limits(text: str, limits: ArgumentLimits) -> bool:
    """True when the JSON text alone proves the decoded value passes `_check_shape`.

    Scans at C speed instead of walking the value in Python. Every count over-estimates
    (brackets and digits inside strings count too), so a True is always right and a
    False only means the walk must decide. Nesting depth is at most the number of
    containers; each value but the root follows a ',', ':' or '['; an unsafe integer
    needs 16 digits and an infinite float a long exponent; a lone surrogate needs a
    unicode escape or a raw surrogate character.
    """
    return (
        text.count("{") + text.count("[") <= limits.max_depth
        and 1 + text.count(",") + text.count(":") + text.count("[") <= limits.max_items
        and "\\u" not in text
        and (text.isascii() or _SURROGATE.search(text) is None)
        and _RISKY_NUMBER.search(text) is None
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
        kind = _kind(node)
        if kind == "string":
            if not _is_text(node):  # type: ignore[arg-type]
                raise _syntax("a string contains a lone surrogate, which is not Unicode text")
            size += len(node) + 2  # type: ignore[arg-type]
        elif kind == "object" or kind == "array":  # noqa: PLR1714 - cheaper than a set here
            if depth > limits.max_depth:
                raise _syntax(f"nesting is deeper than {limits.max_depth} levels")
            if kind == "array":
                stack.extend((child, depth + 1) for child in node)  # type: ignore[attr-defined]
                continue
            for key, child in node.items():  # type: ignore[attr-defined]
                if type(key) is not str and not isinstance(key, str):
                    raise _syntax("object keys must be strings")
                if not _is_text(key):
                    raise _syntax("a key contains a lone surrogate, which is not Unicode text")
                size += len(key) + 4
                stack.append((child, depth + 1))
        elif kind == "integer":
            if not -_SAFE_INTEGER <= node <= _SAFE_INTEGER:  # type: ignore[operator]
                raise _syntax("an integer is outside the safe range of ±(2**53 - 1)")
            size += 8
        elif kind == "number":
            if not math.isfinite(node):  # type: ignore[arg-type]
                raise _syntax("NaN and infinite numbers are not valid JSON")
            size += 8
        else:
            size += 4
    return size


def inexact_in_a_plan(number: float) -> bool:
    """Whether a float comes back from a plan's canonical JSON as an unsafe integer.

    A plan keeps its arguments as RFC 8785 text, which writes numbers as ECMAScript
    does: a whole number below 1e21 without an exponent, so 1e16 is stored as
    `10000000000000000` and read back as the int 10**16. From 2**53 on every float is
    a whole number and that int lies outside ±(2**53 - 1): stage 1 refuses it when the
    model writes it as an integer, RFC 8785 refuses to write it again (the plan could
    never execute), and its digits need not be the ones the model sent (the decoder
    already turned 9007199254740993.0 into ...992.0). Below 2**53 the int is the same
    number and writes the same text again; from 1e21 on the text has an exponent and
    reads back as the same float; fractions never become ints.
    """
    return _WHOLE_FLOAT <= abs(number) < _EXPONENT_FORM


def _refuse_plan_changes(value: dict[str, Any]) -> None:
    """Refuse every float `inexact_in_a_plan`, named by its path, at any depth.

    Runs after `_check_shape`, so the value is bounded JSON with string keys; for JSON
    text only when `_LARGE_FLOAT` says such a number may be in it.
    """
    found: list[str] = []
    stack: list[tuple[object, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float):
            if inexact_in_a_plan(node):
                found.append(json_path(path))
        elif isinstance(node, Mapping):
            stack.extend((child, (*path, key)) for key, child in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((child, (*path, index)) for index, child in enumerate(node))
    if not found:
        return
    raise Refusal(
        ErrorCode.INVALID_ARGUMENTS,
        "A number in the arguments is too large for a write to keep exactly; "
        "correct the listed fields.",
        stage="syntax",
        retryable=True,
        field_errors=dict.fromkeys(sorted(found)[:_MAX_FIELD_ERRORS], _NOT_IN_A_PLAN),
        detail="a float in [2**53, 1e21) in a write's arguments",
    )


def _checked_text(raw: str, limits: ArgumentLimits) -> str:
    # Each character is at least one byte, so only long strings need encoding.
    if len(raw) > limits.max_bytes or (
        len(raw) * 4 > limits.max_bytes
        and len(raw.encode("utf-8", "surrogatepass")) > limits.max_bytes
    ):
        raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
    return raw


def parse_arguments(
    raw: object,
    limits: ArgumentLimits,
    *,
    write: bool,
) -> dict[str, Any]:
    """Stage 1: decode the provider's arguments into a JSON object, within limits.

    Accepts JSON text (str or UTF-8 bytes), an already decoded mapping, or nothing
    (an empty object). Refuses non-objects, duplicate keys, NaN and infinities,
    invalid UTF-8, lone surrogates, oversized, too deep or too numerous input. With
    `write` (arguments bound for a plan or an execution record), also every float
    `inexact_in_a_plan` would flag, with its path as a field error; a read's
    arguments are never stored to run again, so it gets such a float as decoded.
    """
    if type(raw) is str:  # the common case first: most providers send JSON text
        # At most four UTF-8 bytes a character: short text needs no measuring.
        text = raw if len(raw) * 4 <= limits.max_bytes else _checked_text(raw, limits)
    elif raw is None:
        return {}
    elif isinstance(raw, Mapping):
        if _check_shape(raw, limits) > limits.max_bytes:
            raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
        decoded = dict(raw)
        if write:
            _refuse_plan_changes(decoded)
        return decoded
    elif isinstance(raw, bytes | bytearray | memoryview):
        if len(raw) > limits.max_bytes:
            raise _syntax(f"the arguments are larger than {limits.max_bytes} bytes")
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise _syntax("the arguments are not valid UTF-8") from None
    elif isinstance(raw, str):
        text = _checked_text(raw, limits)
    else:
        raise _syntax(f"arguments of type {type(raw).__name__} are not JSON")
    if not text or text.isspace():
        return {}
    quick = _quick(text, limits, write=write)
    if quick is not None:
        return quick
    try:
        value = _DECODER.decode(text)
    except _DuplicateKeyError as exc:
        raise _syntax(f"the key {exc.key[:64]!r} appears more than once") from None
    except RecursionError:
        raise _syntax(f"nesting is deeper than {limits.max_depth} levels") from None
    except _ConstantError as exc:
        raise _syntax(str(exc)) from None
    except json.JSONDecodeError as exc:
        # The decoder's message names only a position, never the input.
        raise _syntax(f"invalid JSON ({exc.msg[:120]})") from None
    except ValueError:
        # Python's integer-digits limit; its text advises a Python API, so say it ourselves.
        raise _syntax("a number literal has too many digits") from None
    if not isinstance(value, dict):
        raise _syntax(f"expected a JSON object, got {type(value).__name__}")
    if not _text_within_limits(text, limits):
        _check_shape(value, limits)
    if write and _LARGE_FLOAT.search(text) is not None:
        _refuse_plan_changes(value)
    return value


def refuse_defect(defect: str) -> Refusal:
    """Stage 1's refusal of a call an adapter marked as unusable (for example truncated)."""
    return _syntax(defect)
