"""Idempotency-Key records in `MemoryStore`: the same contract as `SqlIdempotency`.

One dictionary keyed by (tenant, user, key) under the store's lock: a claim replaces
only an expired record, finishing and releasing are compare-and-sets on the claim.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

from handrail.idempotency_keys import IdempotencyRecord, IdempotencyState

__all__ = ["MemoryIdempotency"]

_Key = tuple[str, str, str]


def _utc(record: IdempotencyRecord) -> IdempotencyRecord:
    return dataclasses.replace(
        record,
        created_at=record.created_at.astimezone(UTC),
        expires_at=record.expires_at.astimezone(UTC),
    )


class MemoryIdempotency:
    """Idempotency-Key records: `MemoryStore` methods."""

    _lock: threading.Lock
    _idempotency: dict[_Key, IdempotencyRecord]

    def _init_idempotency(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
        self._idempotency = {}

    def claim_idempotency_key(self, record: IdempotencyRecord) -> IdempotencyRecord | None:
        """Hold the key unless a live record does; that record otherwise."""
        if record.state is not IdempotencyState.RUNNING:
            msg = "a key is claimed by a RUNNING record"
            raise ValueError(msg)
        key = (record.tenant_id, record.user_id, record.key)
        with self._lock:
            held = self._idempotency.get(key)
            if held is not None and held.live(record.created_at):
                return held
            self._idempotency[key] = _utc(record)
            return None

    def finish_idempotency_key(self, record: IdempotencyRecord) -> bool:
        """Replace the RUNNING record of this claim by the DONE one."""
        if record.state is not IdempotencyState.DONE:
            msg = "a key is finished with a DONE record"
            raise ValueError(msg)
        key = (record.tenant_id, record.user_id, record.key)
        with self._lock:
            held = self._idempotency.get(key)
            if not _held_by(held, record.claim):
                return False
            self._idempotency[key] = _utc(record)
            return True

    def release_idempotency_key(
        self, *, tenant_id: str, user_id: str, key: str, claim: str
    ) -> bool:
        """Drop the RUNNING record of this claim."""
        with self._lock:
            if not _held_by(self._idempotency.get((tenant_id, user_id, key)), claim):
                return False
            del self._idempotency[tenant_id, user_id, key]
            return True

    def purge_idempotency_keys(self, *, before: datetime, limit: int = 1000) -> int:
        """Drop the oldest records expired by `before`, at most `limit`."""
        with self._lock:
            expired = sorted(
                (r.expires_at, k) for k, r in self._idempotency.items() if r.expires_at <= before
            )[: max(0, limit)]
            for _, key in expired:
                del self._idempotency[key]
            return len(expired)


def _held_by(record: IdempotencyRecord | None, claim: str) -> bool:
    return record is not None and record.claim == claim and record.state is IdempotencyState.RUNNING
