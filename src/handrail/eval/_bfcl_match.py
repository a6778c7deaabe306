"""The argument matcher: does a checked call's arguments equal one of BFCL's possible answers?

Written from BFCL's documented AST rules, not from its code. A parameter the possible
answer lists must carry one of its acceptable values, or be left out when `""` is
among them; a parameter it does not list is unexpected. Strings compare without case,
spaces and the punctuation `, . / - _ * ^` (and `'` reads as `"`); numbers by value
(an integer where a float is expected is fine); booleans only with booleans; lists
element by element in order; a dict against a pattern of acceptable values per key.
Parallel answers pair calls with expected calls in any order, one to one. Types were
checked before, by the schema stage: the matcher sees arguments that passed it.
(BFCL's CHANGELOG documents the string standardization, #309, and int for float, #407.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from handrail.eval._bfcl_data import ExpectedCall

__all__ = ["CallMatch", "best_pairing", "match_call", "matches", "standardize"]

_IGNORED: Final = re.compile(r"[\s,./\-_*^]")
OMITTED: Final = ""
"""Among a parameter's acceptable values: the parameter may be left out."""


def standardize(text: str) -> str:
    """A string as BFCL compares it: lower case, no spaces or `, . / - _ * ^`, `'` as `"`."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def matches(value: object, acceptable: object) -> bool:  # noqa: PLR0911 - one case per JSON kind
    """Whether one argument value is this acceptable value (a pattern for dicts)."""
    if isinstance(acceptable, Mapping):
        return isinstance(value, Mapping) and _dict_matches(value, acceptable)
    if isinstance(acceptable, list):
        return (
            isinstance(value, list)
            and len(value) == len(acceptable)
            and all(matches(v, a) for v, a in zip(value, acceptable, strict=True))
        )
    if isinstance(acceptable, str):
        return isinstance(value, str) and standardize(value) == standardize(acceptable)
    if isinstance(acceptable, bool):
        return isinstance(value, bool) and value is acceptable
    if _number(acceptable):
        return _number(value) and value == acceptable
    if acceptable is None:
        return value is None
    return False


def _alternatives(pattern_value: object) -> Sequence[object]:
    # In a dict pattern each key lists its acceptable values; a lone value is the only one.
    return pattern_value if isinstance(pattern_value, list) else (pattern_value,)


def _dict_matches(value: Mapping[str, Any], pattern: Mapping[str, Any]) -> bool:
    if not set(value) <= set(pattern):
        return False
    for key, listed in pattern.items():
        options = _alternatives(listed)
        if key in value:
            if not any(matches(value[key], option) for option in options):
                return False
        elif OMITTED not in options:
            return False
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class CallMatch:
    """How one call's arguments compare with one expected call of the same function."""

    matched: int
    """Parameters of the expected call whose value (or absence) is acceptable."""
    total: int
    """Parameters the expected call lists."""
    reason: str | None
    """Why the call is not acceptable; None when it is."""

    @property
    def accepted(self) -> bool:
        """Every listed parameter acceptable and no unexpected one."""
        return self.reason is None


_SHOWN: Final = 60


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def match_call(arguments: Mapping[str, Any], expected: ExpectedCall) -> CallMatch:
    """Compare checked arguments with one expected call (of the same function)."""
    reasons: list[str] = []
    unexpected = sorted(set(arguments) - set(expected.params))
    if unexpected:
        reasons.append(f"unexpected parameter {unexpected[0]!r}")
    matched = 0
    for name, options in expected.params.items():
        if name in arguments:
            if any(matches(arguments[name], option) for option in options):
                matched += 1
            else:
                shown = ", ".join(_shown(o) for o in options if o != OMITTED)
                reasons.append(f"{name}={_shown(arguments[name])} is not among {shown}")
        elif OMITTED in options:
            matched += 1
        else:
            reasons.append(f"parameter {name!r} is missing")
    reason = f"{expected.function}: {'; '.join(reasons)}" if reasons else None
    return CallMatch(matched=matched, total=len(expected.params), reason=reason)


def best_pairing(weights: Sequence[Sequence[int]], expected: int) -> int:
    """The largest total weight of a one-to-one pairing of calls with expected calls.

    `weights[call][slot]` is what pairing that call with that expected call is worth
    (0 for a call of another function). A search over the subsets of expected calls,
    which BFCL's data keeps at most 16 (`_bfcl_data`), for every number of calls.
    """
    best: dict[int, int] = {0: 0}
    for row in weights:
        grown = dict(best)
        for used, total in best.items():
            for slot in range(expected):
                weight = row[slot]
                if weight and not used & (1 << slot):
                    key = used | (1 << slot)
                    if grown.get(key, -1) < total + weight:
                        grown[key] = total + weight
        best = grown
    return max(best.values())
