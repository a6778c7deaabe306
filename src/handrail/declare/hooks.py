"""What a tool's reconcile hook answers about a write whose outcome is unknown.

Owns the three answers: `Found` (it happened: here is the result), `NotExecuted` (proof
it did not) and `NoProof` (the downstream cannot tell yet). A tool declares the hook;
the reconciler (`handrail.writes.reconcile`) acts on its answer. Never calls anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["Found", "NoProof", "NotExecuted", "Reconciled"]


@dataclass(frozen=True, slots=True)
class Found:
    """The downstream system has the effect of this key; `result` is what it holds."""

    result: object = None


@dataclass(frozen=True, slots=True)
class NotExecuted:
    """The downstream system proves it never executed this key."""


@dataclass(frozen=True, slots=True)
class NoProof:
    """Nothing conclusive; check again later."""

    reason: str = "no proof either way"


Reconciled: TypeAlias = Found | NotExecuted | NoProof
