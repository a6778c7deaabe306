"""The Store protocol: what Handrail persists, independent of the database.

Methods block; async callers run them in a worker thread, unless the store says its
reads never wait (`reads_block`), as the memory store does, or, for one record read by
its key, that such reads never wait long (`point_reads_block`). Every moving part is a
compare-and-set: a method that loses a race returns False (or None) and changes
nothing, so callers re-read instead of overwriting. Uniqueness (plan ids, nonces,
approvals, idempotency keys) is enforced by the database, never by check-then-insert.
Each implementation passes the contract tests in tests/store/.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from handrail.api_keys import ApiKeyRecord
from handrail.conversations import ConversationRecord
from handrail.events import AuditEvent
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.idempotency_keys import IdempotencyRecord
from handrail.people import PersonRecord, SessionRecord
from handrail.pins import PinRecord
from handrail.plans import PlanRecord, PlanState
from handrail.raw import RawRecord
from handrail.runs import RunRecord, RunState
from handrail.sharing import GuardRecord, HandedSecret
from handrail.tasking import TaskRecord, TaskState

__all__ = ["Store", "point_reads_block", "reads_block"]


def reads_block(store: object) -> bool:
    """Whether `store`'s reads may wait (on I/O, a pool, another process): True unless it says not.

    A store whose class sets `reads_block = False` answers every read from its own
    memory, holding at most an in-process lock for in-memory work, so an async caller
    on the hot path may call its reads inline instead of paying for a worker thread.
    A subclass whose reads can wait (I/O, sleeps, waiting on another thread) sets it
    back to True. Writes are not covered: they run in a worker thread as before.
    """
    return getattr(store, "reads_block", True) is not False


def point_reads_block(store: object) -> bool:
    """Whether reading one record by its key (an API key, say) may wait on `store`.

    False when no read of it waits (`reads_block`), or when its class sets
    `point_reads_block = False`: such a read then costs about its own work (a local
    index lookup, never a wait for a lock, a pool or the network), less than a worker
    thread's hop, so an async caller on the hot path may make it inline. Other reads,
    which may scan, and writes still run in a worker thread.
    """
    return reads_block(store) and getattr(store, "point_reads_block", True) is not False


class Store(Protocol):
    """Durable state: audit, plans, approvals, executions, raw results, runs, chats, keys, pins.

    API keys are kept as the hash of their secret, never the secret.
    """

    def migrate(self) -> None:
        """Bring the schema to the newest version; safe to call on every start."""
        ...

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Write events atomically, in order. Raises StoreError on failure.

        Text is kept as `handrail.events.storable_events` makes it: a NUL or a lone
        surrogate escaped, text longer than its column clipped.
        """
        ...

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        ...

    def search_audit(
        self,
        *,
        tenant_id: str,
        tool: str | None = None,
        decision: str | None = None,
        code: str | None = None,
        user_id: str | None = None,
        tool_call_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[tuple[int, AuditEvent]]:
        """One tenant's events matching every filter given, newest first, with their seq.

        `seq` is the event's place in the append order (greater is later); `before_seq`
        continues a search below the last seq a page showed (keyset pagination), so
        events appended meanwhile never shift a page. `since` is inclusive, `until`
        exclusive. Filters compare the text as stored (`storable_events`).
        """
        ...

    # --- plans and confirmations -----------------------------------------------------------

    def insert_plan(self, record: PlanRecord) -> bool:
        """Store a new plan; False (and nothing written) if its id is taken."""
        ...

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        """The plan with its state (and its approvals, for APPROVE plans), or None.

        A CONFIRMED plan with a SUCCEEDED execution record reads as EXECUTED: the state
        is derived from the record, so the two can never disagree. A purged record is a
        tombstone that keeps its status, so the plan stays EXECUTED.
        """
        ...

    def move_plan(
        self,
        plan_id: str,
        *,
        expect_state: PlanState,
        expect_version: int,
        state: PlanState,
        at: datetime,
    ) -> bool:
        """Set the plan's state if it is still (expect_state, expect_version).

        A CONFIRMED plan moves anywhere but EXECUTED only while no execution of it has
        started (a record other than PREPARED or FAILED_FINAL): once its write may have
        happened, it cannot be withdrawn.
        """
        ...

    def use_nonce(self, nonce: str, *, plan_id: str, user_id: str, at: datetime) -> bool:
        """Record a confirmation nonce as used; False if it was used before (a replay)."""
        ...

    def add_approval(self, plan_id: str, *, user_id: str, at: datetime) -> bool:
        """Record one person's approval of a plan; False if they had approved it already."""
        ...

    def list_plans(
        self,
        *,
        tenant_id: str | None = None,
        state: PlanState | None = None,
        limit: int = 50,
    ) -> list[PlanRecord]:
        """Matching plans for people, newest first (by creation; ties: greater id first).

        Each reads as `get_plan` reads it (EXECUTED derived from its record, approvals of
        APPROVE plans), and `state` filters by that state.
        """
        ...

    # --- executions ----------------------------------------------------------------------------

    def insert_execution(
        self,
        record: ExecutionRecord,
        *,
        require_confirmed_plan: bool = False,
    ) -> bool:
        """Insert a new record; False if its idempotency key exists (insert-on-conflict).

        With `require_confirmed_plan`, also False (nothing written) unless the record's
        plan is CONFIRMED at that moment: the claim and the plan check are one step.
        """
        ...

    def get_execution(self, key: str) -> ExecutionRecord | None:
        """The record of a key, or None."""
        ...

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
        """Write `record` over the stored row if that row is still as expected.

        The row must have `expect_status` and `expect_version`; with `lease_owner`, it
        must also be leased to that owner, and with `lease_valid_at` the lease must not
        have expired at that time (fencing a worker whose lease ran out). With
        `require_confirmed_plan`, the record's plan must be CONFIRMED, checked in the same
        statement (re-running a released record of a plan withdrawn meanwhile is refused).
        """
        ...

    def due_executions(
        self,
        *,
        now: datetime,
        limit: int,
        tool: str | None = None,
        tenant_id: str | None = None,
        key: str | None = None,
    ) -> list[ExecutionRecord]:
        """Records the reconciler must look at, least recently updated first.

        RUNNING ones whose lease expired, and UNKNOWN ones whose next check is due and
        whose lease (if any) has expired. `tool`, `tenant_id` and `key`, when given,
        keep only the records that match every one of them.
        """
        ...

    def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 50,
    ) -> list[ExecutionRecord]:
        """Records for people, most recently updated first, optionally filtered.

        Tombstones of purged records are included (`ExecutionRecord.purged`).
        """
        ...

    def purge_executions(self, *, now: datetime) -> int:
        """Strip settled records whose retention ended by `now` to tombstones; how many.

        A tombstone (`ExecutionRecord.tombstone`) keeps the row and its key for good,
        without arguments, principal snapshot or result, so no plan or command id can
        ever claim the key again: exactly-once never depends on retention settings.
        Tombstones are not purged again.
        """
        ...

    # --- raw results -------------------------------------------------------------------------

    def put_raw(self, record: RawRecord) -> None:
        """Store a new raw record. A ref that exists already is a StoreError: never overwritten."""
        ...

    def get_raw(self, ref: str) -> RawRecord | None:
        """The record of a ref with its body, expired or not, or None."""
        ...

    def purge_raw(self, *, before: datetime) -> int:
        """Delete the records with `expires_at <= before`; how many."""
        ...

    def list_raw(self, *, tenant_id: str, limit: int = 50) -> list[RawRecord]:
        """A tenant's records, newest first (by `created_at`, then ref), expired ones too.

        Bodies are left out (`b""`) so a listing never loads megabytes; `size` and
        `complete` still describe the stored body, which `get_raw` returns.
        """
        ...

    # --- runs --------------------------------------------------------------------------------

    def insert_run(self, record: RunRecord) -> bool:
        """Store a new run with its entries; False (and nothing written) if its id is taken."""
        ...

    def update_run(self, record: RunRecord, *, expect_version: int) -> bool:
        """Write `record` over the stored run if that run is still at `expect_version`.

        `record.version` must be `expect_version + 1` (else ValueError, nothing asked).
        Only state, version, updated_at and data change: the tenant, user and creation
        time are fixed at insert. `record.entries` are appended after the run's stored
        ones in the same transaction (stored rows are never rewritten). False (nothing
        written) for an unknown or moved run. Entries a store cannot keep as text
        (`check_entries`) are a ValueError, nothing asked.
        """
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run of an id with its entries (those its version stored, in order), or None."""
        ...

    def list_runs(
        self,
        *,
        tenant_id: str | None = None,
        state: RunState | None = None,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[RunRecord]:
        """Matching runs with their entries, most recently updated first.

        Ties: greater run id first.
        """
        ...

    # --- state shared by the workers of one service (the workers part) ---------------------

    def guard_state(self, tenant_id: str, conversation: str) -> GuardRecord:
        """A conversation's denial count and denied targets; an empty record if never denied."""
        ...

    def add_guard_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
        at: datetime,
    ) -> GuardRecord:
        """Count one denial of a conversation and remember its target; the record afterwards.

        Atomic, also across processes: each call adds exactly one (an upsert returning
        the new count, never read-then-write), so exactly one denial sees the count
        reach a limit. A target (with the tool it was denied to) is kept while the
        conversation has fewer than `MAX_GUARD_TARGETS` targets, or already has it.
        """
        ...

    def purge_guard_states(self, *, before: datetime) -> int:
        """Forget the conversations whose last denial was before `before`; how many."""
        ...

    def note_secret_handle(self, tenant_id: str, handle: str, *, at: datetime) -> bool:
        """Note that `handle` was handed to a tool for `tenant_id`; False if noted before.

        Names only: no value, hash or other form of a secret is ever stored.
        """
        ...

    def list_secret_handles(self) -> list[HandedSecret]:
        """Every handle noted, oldest first (ties: by tenant, then handle)."""
        ...

    def renew_run_lease(self, run_id: str, *, owner: str, until: datetime) -> bool:
        """Move a RUNNING run's lease to end at `until` if `owner` still holds it.

        The version does not move (the run's own writes go on by compare-and-set);
        False (nothing written) for an unknown run, another owner, or a run not RUNNING.
        An owner no run could have (`check_lease_owner`) is a ValueError, nothing asked.
        """
        ...

    def take_over_run(
        self, run_id: str, *, expect_version: int, owner: str, until: datetime, at: datetime
    ) -> bool:
        """Lease a RUNNING run whose lease ran out by `at` to `owner`, until `until`.

        A compare-and-set on `expect_version` that also moves the version by one (and
        `updated_at` to `at`), so the previous owner's next write fails: of two takers
        exactly one wins, and a heartbeat and a take-over never both succeed. False
        (nothing written) for an unknown run, a moved one, one not RUNNING, one never
        leased, or a lease still running at `at`. An owner `check_lease_owner` refuses
        is a ValueError, nothing asked.
        """
        ...

    def expired_runs(self, *, now: datetime, limit: int) -> list[str]:
        """Ids of RUNNING runs whose lease ran out by `now`, the longest expired first."""
        ...

    # --- conversations -------------------------------------------------------------------------

    def insert_conversation(self, record: ConversationRecord) -> bool:
        """Store a new conversation (no turns yet); False (nothing written) if its id is taken."""
        ...

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation of an id, or None."""
        ...

    def claim_conversation(
        self,
        conversation_id: str,
        *,
        run_id: str | None,
        expect_run_id: str | None,
        at: datetime,
    ) -> bool:
        """Set the run that holds the conversation if it is still `expect_run_id`.

        A compare-and-set: of two claims from the same holder exactly one wins. False
        (nothing written) for an unknown conversation or another holder.
        """
        ...

    def append_turns(
        self,
        conversation_id: str,
        turns: Sequence[str],
        *,
        expect_turns: int,
        at: datetime,
    ) -> bool:
        """Append turns (JSON text, one row each) if the conversation still has `expect_turns`.

        The new rows are numbered from `expect_turns` on and the count moves with them, in
        one transaction: of two appends at one count exactly one wins, and the loser writes
        nothing. Rows already stored are never rewritten. False for an unknown conversation.
        Text `check_turns` refuses is a ValueError, nothing asked.
        """
        ...

    def get_turns(
        self,
        conversation_id: str,
        *,
        start: int = 0,
        stop: int | None = None,
    ) -> list[str]:
        """The conversation's turns numbered `start` up to `stop` (or the end), in order."""
        ...

    def list_conversations(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 50,
    ) -> list[ConversationRecord]:
        """A tenant's (or one user's) conversations, most recently updated first.

        Ties: greater conversation id first.
        """
        ...

    # --- pins of imported MCP tools -----------------------------------------------------------

    def insert_pin(self, record: PinRecord) -> bool:
        """Store the first approved definition of a tool (version 1); False if one exists."""
        ...

    def replace_pin(self, record: PinRecord, *, expect_version: int) -> bool:
        """Write a re-approval over the stored pin if it is still at `expect_version`.

        `record.version` must be `expect_version + 1` (else ValueError, nothing asked).
        False (nothing written) for an unknown or moved pin.
        """
        ...

    def get_pin(self, upstream: str, tool: str) -> PinRecord | None:
        """The pin of one upstream tool, or None."""
        ...

    def list_pins(self, *, upstream: str | None = None) -> list[PinRecord]:
        """Every pin (or one upstream's), ordered by upstream, then tool name."""
        ...

    # --- API keys ------------------------------------------------------------------------------

    def insert_api_key(self, record: ApiKeyRecord) -> bool:
        """Store a new key (its secret's hash only); False (nothing written) if its id is taken."""
        ...

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key of an id, revoked or not, or None."""
        ...

    def list_api_keys(
        self,
        *,
        tenant_id: str,
        user_id: str | None = None,
        limit: int = 100,
    ) -> list[ApiKeyRecord]:
        """A tenant's (or one user's) keys, newest first. Ties: greater key id first."""
        ...

    def revoke_api_key(self, key_id: str, *, tenant_id: str, at: datetime) -> bool:
        """Mark a key of this tenant revoked at `at` if it is not already.

        A compare-and-set: False (nothing written) for an unknown key, a key of another
        tenant, or one already revoked; its first revocation time stays.
        """
        ...

    # --- people and console sessions (the console part) ------------------------------------

    def insert_person(self, record: PersonRecord) -> bool:
        """Store a new person; False (nothing written) if the login or tenant's user is taken."""
        ...

    def get_person(self, login: str) -> PersonRecord | None:
        """The person of a login, of any tenant (the caller scopes it), or None."""
        ...

    def list_people(self, *, tenant_id: str, limit: int = 100) -> list[PersonRecord]:
        """A tenant's people, ordered by login."""
        ...

    def replace_person(self, record: PersonRecord, *, expect_version: int) -> bool:
        """Write a person over the stored one if it is still at `expect_version`.

        `record.version` must be `expect_version + 1` (else ValueError, nothing asked).
        Login, tenant, user and creation time stay as stored. False (nothing written)
        for an unknown or moved person.
        """
        ...

    def record_failed_login(
        self, login: str, *, at: datetime, max_failed: int, lock_until: datetime
    ) -> PersonRecord | None:
        """Count one failed login atomically; the person after, or None for an unknown login.

        When the count reaches `max_failed` the account is locked until `lock_until`
        and its count starts again from zero, in the same transaction, so concurrent
        failures can neither lose a count nor skip the lock.
        """
        ...

    def insert_session(self, record: SessionRecord) -> bool:
        """Store a new session; False (nothing written) if its hash exists."""
        ...

    def get_session(self, session_hash: str) -> SessionRecord | None:
        """The session of a hash, revoked or expired ones too, or None."""
        ...

    def touch_session(self, session_hash: str, *, at: datetime) -> bool:
        """Move an unrevoked session's last use forward to `at` (never back); False otherwise."""
        ...

    def revoke_session(self, session_hash: str, *, at: datetime) -> bool:
        """Revoke one session at `at` unless it is already; False (nothing written) otherwise."""
        ...

    def revoke_sessions(self, login: str, *, at: datetime) -> int:
        """Revoke every unrevoked session of a login; how many."""
        ...

    def purge_sessions(self, *, before: datetime) -> int:
        """Delete sessions that ended (expired or revoked) before `before`; how many."""
        ...

    # --- task records ---------------------------------------------------------------------------

    def insert_task(self, record: TaskRecord) -> bool:
        """Store a new task (version 1); False (nothing written) if its id exists."""
        ...

    def replace_task(self, record: TaskRecord, *, expect_version: int) -> bool:
        """Write a task over the stored one if it is still at `expect_version`.

        `record.version` must be `expect_version + 1` (else ValueError, nothing asked).
        False (nothing written) for an unknown or moved task.
        """
        ...

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task of an id, of any tenant (the caller scopes it), or None."""
        ...

    def latest_task(self, intent_key: str) -> TaskRecord | None:
        """The task of an intent key with the highest generation, of any tenant, or None."""
        ...

    def list_tasks(
        self,
        *,
        tenant_id: str,
        state: TaskState | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        """A tenant's tasks (or those in one state), newest first. Ties: greater id first."""
        ...

    # --- Idempotency-Key records of the HTTP API (the serve part) ---------------------------

    def claim_idempotency_key(self, record: IdempotencyRecord) -> IdempotencyRecord | None:
        """Claim a caller's key for a request: insert `record` (RUNNING) unless a live one holds it.

        None when this request now holds the key; otherwise the record that does, as
        stored. A record that expired by `record.created_at` is replaced in the same
        transaction. Of racing claims of one key exactly one gets None.
        """
        ...

    def finish_idempotency_key(self, record: IdempotencyRecord) -> bool:
        """Keep the answer: the RUNNING record of `record`'s key and claim becomes `record` (DONE).

        A compare-and-set on the claim: False (nothing written) when the key is held by
        another claim, is already DONE, or is gone.
        """
        ...

    def release_idempotency_key(
        self, *, tenant_id: str, user_id: str, key: str, claim: str
    ) -> bool:
        """Drop the RUNNING record of this claim (its request kept no answer); False if not held."""
        ...

    def purge_idempotency_keys(self, *, before: datetime, limit: int = 1000) -> int:
        """Delete up to `limit` records that expired by `before`; how many were deleted."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
