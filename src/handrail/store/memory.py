"""MemoryStore: the Store contract in one process's memory, for tests only.

It passes the same contract tests as the SQL stores. It is not durable and not shared
between processes, so it never backs a real deployment.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ClassVar

from handrail.api_keys import ApiKeyRecord
from handrail.conversations import ConversationRecord, check_turns
from handrail.errors import StoreError
from handrail.events import AuditEvent, storable_events
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.pins import PinRecord
from handrail.plans import PlanRecord, PlanState
from handrail.raw import RawRecord
from handrail.runs import RunRecord, RunState, check_entries, check_successor
from handrail.spec import ConfirmationMode
from handrail.store._memory_audit import MemoryAuditSearch
from handrail.store._memory_idempotency import MemoryIdempotency
from handrail.store._memory_people import MemoryPeople
from handrail.store._memory_shared import MemoryShared
from handrail.store._memory_tasks import MemoryTasks
from handrail.tasking import TaskRecord

__all__ = ["MemoryStore"]

_NOT_STARTED = frozenset({ExecutionStatus.PREPARED, ExecutionStatus.FAILED_FINAL})
_IDENTITY = ("plan_id", "plan_hash", "tool", "tenant_id", "user_id", "created_at")


class MemoryStore(MemoryAuditSearch, MemoryTasks, MemoryPeople, MemoryIdempotency, MemoryShared):
    """A thread-safe in-memory Store.

    Its reads never wait on I/O: each holds the lock only for dictionary and list work,
    so async callers may make them inline (`reads_block`, in `handrail.store.base`).
    """

    reads_block: ClassVar[bool] = False
    """Reads answer from memory; a subclass whose reads can wait sets this to True."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._audit: list[AuditEvent] = []
        self._plans: dict[str, PlanRecord] = {}
        self._nonces: set[str] = set()
        self._approvals: dict[str, set[str]] = {}
        self._executions: dict[str, ExecutionRecord] = {}
        self._raw: dict[str, RawRecord] = {}
        self._runs: dict[str, RunRecord] = {}
        self._run_entries: dict[str, list[str]] = {}
        self._conversations: dict[str, ConversationRecord] = {}
        self._turns: dict[str, list[str]] = {}
        self._pins: dict[tuple[str, str], PinRecord] = {}
        self._api_keys: dict[str, ApiKeyRecord] = {}
        self._tasks: dict[str, TaskRecord] = {}
        self._init_people()
        self._init_idempotency()
        self._init_shared()

    def migrate(self) -> None:
        """Nothing to migrate."""

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Append events under a lock, so a batch is never interleaved.

        Kept as the SQL stores keep them (`storable_events`), so all stores read alike.
        """
        stored = storable_events(events)
        with self._lock:
            self._audit.extend(stored)

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        with self._lock:
            rows = [
                e
                for e in self._audit
                if (tenant_id is None or e.tenant_id == tenant_id)
                and (tool_call_id is None or e.tool_call_id == tool_call_id)
            ]
        return rows[-limit:] if limit > 0 else []

    def insert_plan(self, record: PlanRecord) -> bool:
        """Store a new plan unless its id is taken."""
        with self._lock:
            if record.plan.plan_id in self._plans:
                return False
            self._plans[record.plan.plan_id] = dataclasses.replace(record, approvals=frozenset())
            self._approvals.setdefault(record.plan.plan_id, set())
            return True

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        """The plan with its approvals."""
        with self._lock:
            found = self._plans.get(plan_id)
            return None if found is None else self._as_read(found)

    def _as_read(self, found: PlanRecord) -> PlanRecord:
        """A stored plan as `get_plan` reads it: derived state, approvals; under the lock."""
        plan_id = found.plan.plan_id
        if found.state is PlanState.CONFIRMED and any(
            r.plan_id == plan_id and r.status is ExecutionStatus.SUCCEEDED
            for r in self._executions.values()
        ):
            found = dataclasses.replace(found, state=PlanState.EXECUTED)
        if found.plan.confirmation is not ConfirmationMode.APPROVE:
            return found
        return dataclasses.replace(found, approvals=frozenset(self._approvals[plan_id]))

    def move_plan(
        self,
        plan_id: str,
        *,
        expect_state: PlanState,
        expect_version: int,
        state: PlanState,
        at: datetime,
    ) -> bool:
        """Compare-and-set the plan's state."""
        with self._lock:
            found = self._plans.get(plan_id)
            if found is None or (found.state, found.version) != (expect_state, expect_version):
                return False
            if expect_state is PlanState.CONFIRMED and state is not PlanState.EXECUTED:
                started = any(
                    r.plan_id == plan_id and r.status not in _NOT_STARTED
                    for r in self._executions.values()
                )
                if started:
                    return False
            self._plans[plan_id] = dataclasses.replace(
                found,
                state=state,
                version=found.version + 1,
                updated_at=at,
            )
            return True

    def use_nonce(self, nonce: str, *, plan_id: str, user_id: str, at: datetime) -> bool:  # noqa: ARG002 - kept by the SQL stores
        """Mark a nonce used; False on reuse."""
        with self._lock:
            if nonce in self._nonces:
                return False
            self._nonces.add(nonce)
            return True

    def add_approval(self, plan_id: str, *, user_id: str, at: datetime) -> bool:  # noqa: ARG002 - kept by the SQL stores
        """Record an approval once per person."""
        with self._lock:
            approvals = self._approvals.setdefault(plan_id, set())
            if user_id in approvals:
                return False
            approvals.add(user_id)
            return True

    def list_plans(
        self,
        *,
        tenant_id: str | None = None,
        state: PlanState | None = None,
        limit: int = 50,
    ) -> list[PlanRecord]:
        """Matching plans, newest first, each read as `get_plan` reads it."""
        with self._lock:
            found = [
                self._as_read(r)
                for r in self._plans.values()
                if tenant_id is None or r.plan.tenant_id == tenant_id
            ]
        found = [r for r in found if state is None or r.state is state]
        found.sort(key=lambda r: (r.plan.created_at, r.plan.plan_id), reverse=True)
        return found[: max(0, limit)]

    def insert_execution(
        self,
        record: ExecutionRecord,
        *,
        require_confirmed_plan: bool = False,
    ) -> bool:
        """Insert unless the key exists (or, if required, the plan is not CONFIRMED)."""
        with self._lock:
            if record.idempotency_key in self._executions:
                return False
            if require_confirmed_plan:
                plan = self._plans.get(record.plan_id or "")
                if plan is None or plan.state is not PlanState.CONFIRMED:
                    return False
            self._executions[record.idempotency_key] = record
            return True

    def get_execution(self, key: str) -> ExecutionRecord | None:
        """The record of a key."""
        with self._lock:
            return self._executions.get(key)

    def replace_execution(
        self,
        record: ExecutionRecord,
        *,
        expect_status: ExecutionStatus,
        expect_version: int,
        lease_owner: str | None = None,
        lease_valid_at: datetime | None = None,
        require_confirmed_plan: bool = False,
    ) -> bool:
        """Compare-and-set the whole record."""
        with self._lock:
            found = self._executions.get(record.idempotency_key)
            if found is None or (found.status, found.version) != (expect_status, expect_version):
                return False
            if require_confirmed_plan:
                plan = self._plans.get(found.plan_id or "")
                if plan is None or plan.state is not PlanState.CONFIRMED:
                    return False
            if lease_owner is not None and found.lease_owner != lease_owner:
                return False
            if lease_valid_at is not None and (
                found.lease_expires_at is None or found.lease_expires_at <= lease_valid_at
            ):
                return False
            # Identity fields are fixed at insert, as in the SQL stores.
            record = dataclasses.replace(
                record,
                **{name: getattr(found, name) for name in _IDENTITY},
            )
            self._executions[record.idempotency_key] = record
            return True

    def due_executions(
        self,
        *,
        now: datetime,
        limit: int,
        tool: str | None = None,
        tenant_id: str | None = None,
        key: str | None = None,
    ) -> list[ExecutionRecord]:
        """RUNNING records with expired leases and due UNKNOWN ones, oldest first."""
        with self._lock:
            due = [
                r
                for r in self._executions.values()
                if _due(r, now)
                and (tool is None or r.tool == tool)
                and (tenant_id is None or r.tenant_id == tenant_id)
                and (key is None or r.idempotency_key == key)
            ]
        return sorted(due, key=lambda r: (r.updated_at, r.idempotency_key))[: max(0, limit)]

    def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 50,
    ) -> list[ExecutionRecord]:
        """Matching records, most recently updated first."""
        with self._lock:
            found = [
                r
                for r in self._executions.values()
                if (status is None or r.status is status)
                and (tenant_id is None or r.tenant_id == tenant_id)
            ]
        found.sort(key=lambda r: (r.updated_at, r.idempotency_key), reverse=True)
        return found[: max(0, limit)]

    def purge_executions(self, *, now: datetime) -> int:
        """Strip settled records past retention to tombstones; their keys stay taken."""
        with self._lock:
            gone = [
                r
                for r in self._executions.values()
                if r.status.settled and r.retain_until is not None and r.retain_until <= now
            ]
            for record in gone:
                self._executions[record.idempotency_key] = record.tombstone(now.astimezone(UTC))
        return len(gone)

    def put_raw(self, record: RawRecord) -> None:
        """Keep a new raw record; a taken ref is a StoreError, as in the SQL stores."""
        # Times read back in UTC, as from the SQL stores.
        record = dataclasses.replace(
            record,
            created_at=record.created_at.astimezone(UTC),
            expires_at=record.expires_at.astimezone(UTC),
        )
        with self._lock:
            if record.ref in self._raw:
                raise StoreError("raw insert failed: the ref exists")
            self._raw[record.ref] = record

    def get_raw(self, ref: str) -> RawRecord | None:
        """The record of a ref, with its body."""
        with self._lock:
            return self._raw.get(ref)

    def purge_raw(self, *, before: datetime) -> int:
        """Drop the records with `expires_at <= before`."""
        with self._lock:
            gone = [ref for ref, r in self._raw.items() if r.expires_at <= before]
            for ref in gone:
                del self._raw[ref]
        return len(gone)

    def list_raw(self, *, tenant_id: str, limit: int = 50) -> list[RawRecord]:
        """A tenant's records, newest first, bodies left out."""
        with self._lock:
            found = [r for r in self._raw.values() if r.tenant_id == tenant_id]
        found.sort(key=lambda r: (r.created_at, r.ref), reverse=True)
        return [dataclasses.replace(r, body=b"") for r in found[: max(0, limit)]]

    def insert_run(self, record: RunRecord) -> bool:
        """Store a new run, with its entries, unless its id is taken."""
        check_entries(record.entries)
        record = _utc_run(record)
        with self._lock:
            if record.run_id in self._runs:
                return False
            self._runs[record.run_id] = dataclasses.replace(record, entries=())
            self._run_entries[record.run_id] = list(record.entries)
            return True

    def update_run(self, record: RunRecord, *, expect_version: int) -> bool:
        """Compare-and-set the run on its version and append its entries, under one lock.

        Identity fields stay as inserted; stored entries are never rewritten.
        """
        check_successor(record, expect_version=expect_version)
        check_entries(record.entries)
        with self._lock:
            found = self._runs.get(record.run_id)
            if found is None or found.version != expect_version:
                return False
            self._runs[record.run_id] = dataclasses.replace(
                found,
                state=record.state,
                version=record.version,
                updated_at=record.updated_at.astimezone(UTC),
                data=record.data,
                lease_owner=record.lease_owner,
                lease_until=_utc_or_none(record.lease_until),
            )
            self._run_entries[record.run_id].extend(record.entries)
            return True

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run of an id, with its entries."""
        with self._lock:
            found = self._runs.get(run_id)
            if found is None:
                return None
            return dataclasses.replace(found, entries=tuple(self._run_entries[run_id]))

    def list_runs(
        self,
        *,
        tenant_id: str | None = None,
        state: RunState | None = None,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[RunRecord]:
        """Matching runs with their entries, most recently updated first."""
        with self._lock:
            found = [
                dataclasses.replace(r, entries=tuple(self._run_entries[r.run_id]))
                for r in self._runs.values()
                if (tenant_id is None or r.tenant_id == tenant_id)
                and (state is None or r.state is state)
                and (user_id is None or r.user_id == user_id)
            ]
        found.sort(key=lambda r: (r.updated_at, r.run_id), reverse=True)
        return found[: max(0, limit)]

    def insert_conversation(self, record: ConversationRecord) -> bool:
        """Store a new conversation unless its id is taken; it starts with no turns."""
        record = dataclasses.replace(
            record,
            turns=0,
            created_at=record.created_at.astimezone(UTC),
            updated_at=record.updated_at.astimezone(UTC),
        )
        with self._lock:
            if record.conversation_id in self._conversations:
                return False
            self._conversations[record.conversation_id] = record
            self._turns[record.conversation_id] = []
            return True

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation of an id."""
        with self._lock:
            return self._conversations.get(conversation_id)

    def claim_conversation(
        self,
        conversation_id: str,
        *,
        run_id: str | None,
        expect_run_id: str | None,
        at: datetime,
    ) -> bool:
        """Compare-and-set the conversation's run."""
        with self._lock:
            found = self._conversations.get(conversation_id)
            if found is None or found.run_id != expect_run_id:
                return False
            self._conversations[conversation_id] = dataclasses.replace(
                found, run_id=run_id, updated_at=at.astimezone(UTC)
            )
            return True

    def append_turns(
        self,
        conversation_id: str,
        turns: Sequence[str],
        *,
        expect_turns: int,
        at: datetime,
    ) -> bool:
        """Append under the lock if the count is still `expect_turns`."""
        check_turns(turns)
        with self._lock:
            found = self._conversations.get(conversation_id)
            if found is None or found.turns != expect_turns:
                return False
            self._turns[conversation_id].extend(turns)
            self._conversations[conversation_id] = dataclasses.replace(
                found, turns=expect_turns + len(turns), updated_at=at.astimezone(UTC)
            )
            return True

    def get_turns(
        self,
        conversation_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
    ) -> list[str]:
        """The turns numbered `start` up to `stop`."""
        with self._lock:
            stored = self._turns.get(conversation_id, [])
            return stored[max(0, start) : None if stop is None else max(0, stop)]

    def list_conversations(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[ConversationRecord]:
        """A tenant's (or a user's) conversations, most recently updated first."""
        with self._lock:
            found = [
                c
                for c in self._conversations.values()
                if c.tenant_id == tenant_id and (user_id is None or c.user_id == user_id)
            ]
        found.sort(key=lambda c: (c.updated_at, c.conversation_id), reverse=True)
        return found[: max(0, limit)]

    def insert_pin(self, record: PinRecord) -> bool:
        """Store a first approval unless the tool has a pin."""
        if record.version != 1:
            msg = "a new pin starts at version 1"
            raise ValueError(msg)
        key = (record.upstream, record.tool)
        with self._lock:
            if key in self._pins:
                return False
            self._pins[key] = _utc_pin(record)
            return True

    def replace_pin(self, record: PinRecord, *, expect_version: int) -> bool:
        """Compare-and-set a re-approval on the stored version."""
        if record.version != expect_version + 1:
            msg = "a replaced pin's version is expect_version + 1"
            raise ValueError(msg)
        key = (record.upstream, record.tool)
        with self._lock:
            found = self._pins.get(key)
            if found is None or found.version != expect_version:
                return False
            self._pins[key] = _utc_pin(record)
            return True

    def get_pin(self, upstream: str, tool: str) -> PinRecord | None:
        """The pin of one upstream tool."""
        with self._lock:
            return self._pins.get((upstream, tool))

    def list_pins(self, *, upstream: str | None = None) -> list[PinRecord]:
        """Every pin (or one upstream's), by upstream and tool."""
        with self._lock:
            found = [p for p in self._pins.values() if upstream is None or p.upstream == upstream]
        return sorted(found, key=lambda p: (p.upstream, p.tool))

    def insert_api_key(self, record: ApiKeyRecord) -> bool:
        """Store a new key unless its id is taken."""
        record = dataclasses.replace(
            record,
            created_at=record.created_at.astimezone(UTC),
            expires_at=None if record.expires_at is None else record.expires_at.astimezone(UTC),
            revoked_at=None if record.revoked_at is None else record.revoked_at.astimezone(UTC),
        )
        with self._lock:
            if record.key_id in self._api_keys:
                return False
            self._api_keys[record.key_id] = record
            return True

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key of an id."""
        with self._lock:
            return self._api_keys.get(key_id)

    def list_api_keys(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 100,
    ) -> list[ApiKeyRecord]:
        """A tenant's (or a user's) keys, newest first."""
        with self._lock:
            found = [
                k
                for k in self._api_keys.values()
                if k.tenant_id == tenant_id and (user_id is None or k.user_id == user_id)
            ]
        found.sort(key=lambda k: (k.created_at, k.key_id), reverse=True)
        return found[: max(0, limit)]

    def revoke_api_key(self, key_id: str, *, tenant_id: str, at: datetime) -> bool:
        """Compare-and-set the revocation time of a key of this tenant."""
        with self._lock:
            found = self._api_keys.get(key_id)
            if found is None or found.tenant_id != tenant_id or found.revoked_at is not None:
                return False
            self._api_keys[key_id] = dataclasses.replace(found, revoked_at=at.astimezone(UTC))
            return True

    def close(self) -> None:
        """Nothing to release."""


def _due(record: ExecutionRecord, now: datetime) -> bool:
    lease_free = record.lease_expires_at is None or record.lease_expires_at <= now
    if record.status is ExecutionStatus.RUNNING:
        return record.lease_expires_at is not None and record.lease_expires_at <= now
    if record.status is ExecutionStatus.UNKNOWN:
        return lease_free and record.next_check_at is not None and record.next_check_at <= now
    return False


def _utc_pin(record: PinRecord) -> PinRecord:
    # Times read back in UTC, as from the SQL stores.
    return dataclasses.replace(record, approved_at=record.approved_at.astimezone(UTC))


def _utc_run(record: RunRecord) -> RunRecord:
    # Times read back in UTC, as from the SQL stores.
    return dataclasses.replace(
        record,
        created_at=record.created_at.astimezone(UTC),
        updated_at=record.updated_at.astimezone(UTC),
        lease_until=_utc_or_none(record.lease_until),
    )


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)
