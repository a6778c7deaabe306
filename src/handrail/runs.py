"""Run records: the durable state of one agent run, for suspend, resume and replay.

Owns the record and its invariants (an opaque id, aware times, a version that only
moves forward by one). The store keeps it with a compare-and-set on the version, and
keeps its entries append-only: each write may add rows (a step's new turns, replies
and log) without rewriting what is stored, so a long run costs the same per step as a
short one. What `data` and the entries hold is the loop's. This module never reads
them and never decides how a run moves.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = ["RunRecord", "RunState", "check_entries", "check_lease_owner", "check_successor"]

_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_NAME = 256  # the stores' column width for tenant and user ids


class RunState(StrEnum):
    """Where a run stands."""

    RUNNING = "RUNNING"
    """The loop is driving it."""
    SUSPENDED = "SUSPENDED"
    """Waiting on a person (a confirmation, an approval); resumable from its record."""
    FINISHED = "FINISHED"
    """Ended with a final answer."""
    FAILED = "FAILED"
    """Ended without one (a budget tripped, the model failed)."""

    @property
    def ended(self) -> bool:
        """True for FINISHED and FAILED: nothing moves the run on from here."""
        return self in {RunState.FINISHED, RunState.FAILED}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """One stored run. `version` starts at 1 and each stored update adds exactly one.

    `data` is JSON text owned by the loop; the store keeps it verbatim. It must be
    storable as text everywhere: no NUL characters and no lone surrogates.

    `entries` are rows only ever appended, text like `data`. On a record read from the
    store they are all of the run's, oldest first. On a record written they are what
    the write appends after the stored ones (`insert_run`: the first ones; stored rows
    are never rewritten); `advanced` starts the next version with none.
    """

    run_id: str
    tenant_id: str
    user_id: str
    state: RunState
    version: int
    created_at: datetime
    updated_at: datetime
    data: str
    entries: tuple[str, ...] = ()
    lease_owner: str | None = None
    """The worker driving a RUNNING run under a lease (`handrail.loop.leases`), or None."""
    lease_until: datetime | None = None
    """When that lease runs out unless renewed; another worker may then take the run over."""

    def __post_init__(self) -> None:
        if not _RUN_ID.fullmatch(self.run_id):
            msg = "a run id is 1-64 characters of [A-Za-z0-9_-]"
            raise ValueError(msg)
        if len(self.tenant_id) > _MAX_NAME or len(self.user_id) > _MAX_NAME:
            msg = f"a run's tenant and user ids are at most {_MAX_NAME} characters"
            raise ValueError(msg)
        if self.version < 1:
            msg = "a run's version starts at 1"
            raise ValueError(msg)
        if _naive(self.created_at) or _naive(self.updated_at):
            msg = "a run's times must be timezone-aware"
            raise ValueError(msg)
        if (self.lease_owner is None) != (self.lease_until is None):
            msg = "a run's lease has both an owner and an end, or neither"
            raise ValueError(msg)
        if self.lease_until is not None and _naive(self.lease_until):
            msg = "a run's times must be timezone-aware"
            raise ValueError(msg)
        if self.lease_owner is not None:
            check_lease_owner(self.lease_owner)
        _check_text(self.data)

    def advanced(
        self,
        *,
        at: datetime,
        state: RunState | None = None,
        data: str | None = None,
        entries: tuple[str, ...] = (),
    ) -> RunRecord:
        """The next version of this record, updated at `at`; store it with update_run.

        `entries` are what its write appends (none by default).
        """
        return dataclasses.replace(
            self,
            state=self.state if state is None else state,
            data=self.data if data is None else data,
            entries=entries,
            version=self.version + 1,
            updated_at=at,
        )

    def leased(self, owner: str | None, until: datetime | None) -> RunRecord:
        """This record with its lease set (both given) or cleared (both None)."""
        return dataclasses.replace(self, lease_owner=owner, lease_until=until)


def check_successor(record: RunRecord, *, expect_version: int) -> None:
    """Refuse an update whose version is not `expect_version + 1` (a caller's bug)."""
    if record.version != expect_version + 1:
        msg = "an updated run's version must be expect_version + 1"
        raise ValueError(msg)


def check_lease_owner(owner: str) -> None:
    """Refuse a lease owner no store keeps the same (ValueError): empty, too long, a NUL."""
    if not 0 < len(owner) <= _MAX_NAME or "\x00" in owner:
        msg = f"a lease owner is 1-{_MAX_NAME} characters, without NUL"
        raise ValueError(msg)


def check_entries(entries: Sequence[str]) -> None:
    """Refuse entries a store could not keep as text (ValueError), as `data` is refused."""
    for entry in entries:
        _check_text(entry)


def _naive(value: datetime) -> bool:
    return value.tzinfo is None or value.utcoffset() is None


def _check_text(data: str) -> None:
    # PostgreSQL text cannot hold NUL, and no database holds a lone surrogate; refusing
    # both here keeps every store's behaviour the same. ASCII-only JSON escapes both.
    if "\x00" in data:
        msg = "a run's data must not contain NUL characters"
        raise ValueError(msg)
    if not data.isascii():
        try:
            data.encode()
        except UnicodeEncodeError:
            msg = "a run's data must be valid Unicode (no lone surrogates)"
            raise ValueError(msg) from None
