"""A raw result: the full, unshaped result of a tool call as it is kept for people.

Owns the record value (who it belongs to, when it expires, whether its body was capped).
It never decides who may read one (`handrail.record.raw_results` does) and never reaches
a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["RawRecord"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RawRecord:
    """One stored raw result. `size` is the whole original; `body` may be a prefix of it.

    `complete` is False when the stored body was capped, so `len(body) < size`.
    """

    ref: str
    tenant_id: str
    user_id: str
    tool: str
    call_id: str
    created_at: datetime
    expires_at: datetime
    media_type: str
    size: int
    complete: bool
    body: bytes
