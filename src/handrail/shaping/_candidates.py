"""Candidate findings before overlaps are resolved, and the ranks that resolve them.

Owns the candidate tuple every detector appends to and the rule that picks among
overlapping ones (the more specific kind wins). Never finds anything itself.
"""

from __future__ import annotations

import bisect

from handrail.shaping.findings import Finding, Kind

__all__ = [
    "RANK_CARD",
    "RANK_CREDENTIAL",
    "RANK_EMAIL",
    "RANK_ENTROPY",
    "RANK_IBAN",
    "RANK_IP",
    "RANK_PEM",
    "RANK_PHONE",
    "RANK_PRC_ID",
    "Candidate",
    "resolve",
]

# Rank of each detector when findings overlap: lower wins (the more specific kind).
RANK_PEM = 0
RANK_CREDENTIAL = 1
RANK_PRC_ID = 2
RANK_IBAN = 3  # a valid IBAN often holds a Luhn-valid run of digits, never the reverse
RANK_CARD = 4
RANK_EMAIL = 5
RANK_PHONE = 6
RANK_IP = 7
RANK_ENTROPY = 8

Candidate = tuple[int, int, int, Kind]
"""(rank, start, end, kind) of one match before overlaps are resolved."""


def resolve(found: list[Candidate]) -> list[Finding]:
    """Non-overlapping findings: the lower rank wins, then the earlier, then the longer."""
    found.sort(key=lambda c: (c[0], c[1], -c[2]))
    starts: list[int] = []
    ends: list[int] = []
    kinds: list[Kind] = []
    for _, start, end, kind in found:
        i = bisect.bisect_right(starts, start)
        if (i and ends[i - 1] > start) or (i < len(starts) and starts[i] < end):
            continue
        starts.insert(i, start)
        ends.insert(i, end)
        kinds.insert(i, kind)
    return [Finding(kind=k, start=s, end=e) for s, e, k in zip(starts, ends, kinds, strict=True)]
