"""Text cut to a token budget, at a line break where one is near the end.

Owns the one cut the skill tools apply to instructions and references before the gate's
shaper sees them (which may cut further to the turn's share). It never reads files.
"""

from __future__ import annotations

from handrail.shaping.budget import TokenEstimator

__all__ = ["cut_to_tokens"]

_LINE_SLACK = 0.2
"""A cut moves back to the last line break when that loses at most this share of it."""


def cut_to_tokens(text: str, budget: int, estimator: TokenEstimator) -> tuple[str, bool]:
    """The longest prefix of `text` within `budget` tokens, and whether it was cut."""
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
