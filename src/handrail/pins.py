"""Tool pins: the definition of an imported tool as an operator approved it.

Owns the record and its invariants (an upstream and tool name, the approved definition
as canonical JSON text with its SHA-256, who approved it and when, a version that only
grows). What a definition holds and when a pin is written are `handrail.mcp.pins`'s;
the store keeps records by compare-and-set. This module never talks to an upstream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

__all__ = ["PinRecord"]

_UPSTREAM = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_HASH = re.compile(r"[0-9a-f]{64}")
_MAX_TOOL = 128  # the stores' column width for an upstream tool name
_MAX_NAME = 256  # the stores' column width for the approver
_MAX_DEFINITION = 1_000_000


@dataclass(frozen=True, kw_only=True, slots=True)
class PinRecord:
    """The approved definition of one upstream tool.

    `definition` is the canonical JSON text the hash covers (kept so that a changed
    definition can be shown to people as a difference); `version` counts approvals,
    starting at 1, and moves by compare-and-set.
    """

    upstream: str
    tool: str
    definition_hash: str
    definition: str
    approved_by: str
    approved_at: datetime
    version: int = 1

    def __post_init__(self) -> None:
        if not _UPSTREAM.fullmatch(self.upstream):
            msg = "an upstream name is 1-64 characters of [A-Za-z0-9_-], starting with a letter"
            raise ValueError(msg)
        if not self.tool or len(self.tool) > _MAX_TOOL or not self.tool.isprintable():
            msg = f"a pinned tool name is 1-{_MAX_TOOL} printable characters"
            raise ValueError(msg)
        if not _HASH.fullmatch(self.definition_hash):
            msg = "a definition hash is 64 lower-case hex digits (SHA-256)"
            raise ValueError(msg)
        if len(self.definition) > _MAX_DEFINITION or "\x00" in self.definition:
            msg = f"a pinned definition is JSON text of at most {_MAX_DEFINITION} characters"
            raise ValueError(msg)
        if not self.approved_by or len(self.approved_by) > _MAX_NAME:
            msg = f"the approver is 1-{_MAX_NAME} characters"
            raise ValueError(msg)
        if self.version < 1:
            msg = "a pin's version starts at 1"
            raise ValueError(msg)
        if self.approved_at.tzinfo is None or self.approved_at.utcoffset() is None:
            msg = "a pin's approval time must be timezone-aware"
            raise ValueError(msg)
