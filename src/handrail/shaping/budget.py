"""Budgets: how much of a result the model may read, in characters and tokens.

`fit` cuts a JSON value down to a size while keeping it valid JSON of the same shape:
lists keep their first items, strings their first characters, objects share the room
among their members (small ones whole, large ones cut). Every cut is reported as an
Omission with the real total, so the model knows how much it did not see.

Tokens are estimated offline by a pluggable `TokenEstimator`; sizes are characters of
the compact JSON text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic_core

from handrail.envelope import Omission
from handrail.errors import ConfigurationError

__all__ = [
    "Budget",
    "HeuristicTokens",
    "TokenEstimator",
    "child_path",
    "cut_to_tokens",
    "fit",
    "json_size",
    "json_text",
]

# A text cut moves back to the last line break when that loses at most this share of it.
_LINE_SLACK = 0.2
# Below this many characters a member or item is not worth cutting into.
_MIN_PIECE = 16
_MAX_REFITS = 8


class TokenEstimator(Protocol):
    """Estimates how many tokens a model reads for a text; must work offline."""

    def count(self, text: str) -> int:
        """The estimated token count of `text`."""
        ...


class HeuristicTokens:
    """A conservative offline token estimate.

    Four ASCII characters per token, and one token per other character (CJK text
    costs about one token per character). It errs on the high side, so a budget in
    tokens is kept rather than overrun.
    """

    def __init__(self, *, ascii_chars_per_token: float = 4.0) -> None:
        if ascii_chars_per_token <= 0:
            raise ConfigurationError("ascii_chars_per_token must be positive")
        self._ratio = ascii_chars_per_token

    def count(self, text: str) -> int:
        """The estimated token count of `text`."""
        if text.isascii():
            return math.ceil(len(text) / self._ratio)
        ascii_count = len(text.encode("ascii", "ignore"))
        return math.ceil(ascii_count / self._ratio) + (len(text) - ascii_count)


def cut_to_tokens(text: str, budget: int, estimator: TokenEstimator) -> tuple[str, bool]:
    """The longest prefix of `text` within `budget` tokens, and whether it was cut.

    For prose a model reads whole (a skill's instructions): the cut moves back to a
    line break when one is near its end.
    """
    if estimator.count(text) <= budget:
        return text, False
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits: counts grow with length
        middle = (low + high + 1) // 2
        if estimator.count(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    cut = text[:low]
    newline = cut.rfind("\n")
    if newline >= 0 and newline >= low * (1 - _LINE_SLACK):
        cut = cut[: newline + 1]
    return cut, True


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """A limit on the JSON text of a result's data: characters, and optionally tokens."""

    max_chars: int
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_chars < 1 or (self.max_tokens is not None and self.max_tokens < 1):
            raise ConfigurationError("budgets are positive")

    def narrowed(self, max_chars: int | None, max_tokens: int | None) -> Budget:
        """The smaller of this budget and the given limits (None: no limit)."""
        if (max_chars is None or max_chars >= self.max_chars) and (
            max_tokens is None or (self.max_tokens is not None and max_tokens >= self.max_tokens)
        ):
            return self  # nothing narrows: budgets are values, so this one serves
        chars = self.max_chars if max_chars is None else min(self.max_chars, max_chars)
        tokens = self.max_tokens
        if max_tokens is not None:
            tokens = max_tokens if tokens is None else min(tokens, max_tokens)
        return Budget(max_chars=chars, max_tokens=tokens)

    def allows(self, text: str, estimator: TokenEstimator) -> bool:
        """Whether `text` fits in characters and, if limited, in estimated tokens."""
        if len(text) > self.max_chars:
            return False
        return self.max_tokens is None or estimator.count(text) <= self.max_tokens


def child_path(path: str, part: str | int) -> str:
    """The JSONPath of a member or item below `path`: `$.items[2].name`, `$["a b"]`."""
    if isinstance(part, int):
        return f"{path}[{part}]"
    if part.isidentifier() and part.isascii():
        return f"{path}.{part}"
    return f"{path}[{json_text(part)}]"


def json_text(value: object) -> str:
    """The compact JSON text a value is measured by."""
    return pydantic_core.to_json(value, inf_nan_mode="null").decode()


def json_size(value: object) -> int:
    """Characters of the compact JSON text of `value`."""
    return len(json_text(value))


def fit(
    value: object,
    budget: Budget,
    estimator: TokenEstimator,
    *,
    path: str = "$",
) -> tuple[Any, tuple[Omission, ...]]:
    """`value` cut to fit `budget`, and what was left out where.

    Returns the value itself when it fits. The result is always valid JSON of the same
    shape; scalars other than strings are never altered (a lone oversized number is
    returned as it is).
    """
    text = json_text(value)
    if budget.allows(text, estimator):
        return value, ()
    limit = budget.max_chars
    if budget.max_tokens is not None:
        # Characters per token of this very text turn the token limit into characters.
        tokens = max(1, estimator.count(text))
        limit = min(limit, max(1, budget.max_tokens * len(text) // tokens))
    for _ in range(_MAX_REFITS):
        omissions: list[Omission] = []
        out = _fit(value, limit, path, omissions)
        fitted = json_text(out)
        if budget.allows(fitted, estimator) or limit <= 1:
            return out, tuple(omissions)
        # Token estimates are not linear in characters: shrink by the overshoot.
        over = max(len(fitted) / budget.max_chars, _token_ratio(fitted, budget, estimator))
        limit = max(1, int(limit / over) - 1)
    return out, tuple(omissions)


def _token_ratio(text: str, budget: Budget, estimator: TokenEstimator) -> float:
    if budget.max_tokens is None:
        return 0.0
    return estimator.count(text) / budget.max_tokens


def _fit(value: object, limit: int, path: str, omissions: list[Omission]) -> Any:  # noqa: ANN401 - JSON
    if json_size(value) <= limit:
        return value
    if isinstance(value, str):
        return _cut_string(value, limit, path, omissions)
    if isinstance(value, list):
        return _cut_list(value, limit, path, omissions)
    if isinstance(value, dict):
        return _cut_object(value, limit, path, omissions)
    return value


def _cut_string(text: str, limit: int, path: str, omissions: list[Omission]) -> str:
    """The longest prefix whose JSON fits in `limit` (escapes make sizes nonlinear)."""
    low, high = 0, min(len(text), max(0, limit - 2))
    while low < high:
        mid = (low + high + 1) // 2
        if json_size(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    omissions.append(Omission(path=path, unit="chars", kept=low, total=len(text)))
    return text[:low]


def _cut_list(items: list[Any], limit: int, path: str, omissions: list[Omission]) -> list[Any]:
    kept: list[Any] = []
    used = 2  # the brackets
    for index, item in enumerate(items):
        comma = 1 if kept else 0
        size = json_size(item)
        if used + comma + size <= limit:
            kept.append(item)
            used += comma + size
            continue
        room = limit - used - comma
        if not kept and room >= _MIN_PIECE:
            # A first item too large on its own is cut rather than leaving nothing.
            kept.append(_fit(item, room, child_path(path, index), omissions))
        break
    if len(kept) < len(items):
        omissions.append(Omission(path=path, unit="items", kept=len(kept), total=len(items)))
    return kept


def _cut_object(value: dict[str, Any], limit: int, path: str, omissions: list[Omission]) -> Any:  # noqa: ANN401 - JSON
    keys = list(value)
    key_sizes = {key: json_size(key) + 1 for key in keys}  # "key":
    sizes = {key: json_size(value[key]) for key in keys}
    # Members whose key alone does not fit are left out, last ones first.
    room = limit - 2 - sum(key_sizes.values()) - max(0, len(keys) - 1)
    present = list(keys)
    while present and room < _MIN_PIECE * len(present):
        dropped = present.pop()
        room += key_sizes[dropped] + 1
    out: dict[str, Any] = {}
    # Water-filling: the smallest members are kept whole, the rest share what is left.
    left = len(present)
    for key in sorted(present, key=sizes.__getitem__):
        share = room // left if left else 0
        item = value[key]
        if sizes[key] <= share:
            out[key] = item
            room -= sizes[key]
        else:
            out[key] = _fit(item, share, child_path(path, key), omissions)
            room -= json_size(out[key])
        left -= 1
    if len(present) < len(keys):
        omissions.append(Omission(path=path, unit="fields", kept=len(present), total=len(keys)))
    return {key: out[key] for key in keys if key in out}
