"""State the workers of one service share through the store: records the store keeps.

Owns the record types of the shared-state part of the store: a conversation's denial
count and denied targets (`GuardRecord`, read by the conversation guard) and the
secret handles handed out to tools (`HandedSecret`, read by every worker's ledger).
Never holds a secret's value, and never decides anything: the guard and the ledger do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

__all__ = ["MAX_GUARD_TARGETS", "GuardRecord", "HandedSecret"]

MAX_GUARD_TARGETS = 256
"""Denied targets remembered per conversation; later targets are counted, not kept."""

_NONE: Mapping[str, frozenset[str]] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardRecord:
    """One conversation's refusals: how many, and each denied target with its tools."""

    denials: int = 0
    targets: Mapping[str, frozenset[str]] = field(default_factory=lambda: _NONE)


@dataclass(frozen=True, kw_only=True, slots=True)
class HandedSecret:
    """A secret handle some worker handed to a tool for a tenant, and when it first did.

    Only the name: each worker reads the value again from its own SecretProvider.
    """

    tenant_id: str
    handle: str
    first_at: datetime
