"""State shared by the workers of one service in `MemoryStore`: the same contract as `SqlShared`.

Conversation denial counts with their denied targets, the secret handles handed out
(names only), and run leases moved by compare-and-set, all under the store's lock.
Never decides what a count or a lease means.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

from handrail.runs import RunRecord, RunState, check_lease_owner
from handrail.sharing import MAX_GUARD_TARGETS, GuardRecord, HandedSecret

__all__ = ["MemoryShared"]


@dataclasses.dataclass(kw_only=True, slots=True)
class _Guard:
    denials: int
    updated_at: datetime
    targets: dict[str, frozenset[str]]


class MemoryShared:
    """State shared by the workers of one service: `MemoryStore` methods."""

    _lock: threading.Lock
    _runs: dict[str, RunRecord]
    _guards: dict[tuple[str, str], _Guard]
    _handles: dict[tuple[str, str], HandedSecret]

    def _init_shared(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
        self._guards = {}
        self._handles = {}

    # --- the conversation guard ---------------------------------------------------------------

    def guard_state(self, tenant_id: str, conversation: str) -> GuardRecord:
        """The conversation's count and denied targets; an empty record if never denied."""
        with self._lock:
            found = self._guards.get((tenant_id, conversation))
            if found is None:
                return GuardRecord()
            return GuardRecord(denials=found.denials, targets=dict(found.targets))

    def add_guard_denial(
        self,
        tenant_id: str,
        conversation: str,
        *,
        tool: str,
        target: str | None,
        at: datetime,
    ) -> GuardRecord:
        """Count one denial and remember its target, under the lock."""
        with self._lock:
            found = self._guards.setdefault(
                (tenant_id, conversation), _Guard(denials=0, updated_at=at, targets={})
            )
            found.denials += 1
            found.updated_at = at.astimezone(UTC)
            targets = found.targets
            if target is not None and (target in targets or len(targets) < MAX_GUARD_TARGETS):
                targets[target] = targets.get(target, frozenset()) | {tool}
            return GuardRecord(denials=found.denials, targets=dict(targets))

    def purge_guard_states(self, *, before: datetime) -> int:
        """Forget conversations last denied before `before`."""
        with self._lock:
            stale = [key for key, found in self._guards.items() if found.updated_at < before]
            for key in stale:
                del self._guards[key]
            return len(stale)

    # --- secret handles handed out ------------------------------------------------------------

    def note_secret_handle(self, tenant_id: str, handle: str, *, at: datetime) -> bool:
        """Note a handle unless noted before; True for the first note."""
        with self._lock:
            if (tenant_id, handle) in self._handles:
                return False
            self._handles[(tenant_id, handle)] = HandedSecret(
                tenant_id=tenant_id, handle=handle, first_at=at.astimezone(UTC)
            )
            return True

    def list_secret_handles(self) -> list[HandedSecret]:
        """Every handle handed out, oldest first (then by tenant and handle)."""
        with self._lock:
            found = list(self._handles.values())
        return sorted(found, key=lambda h: (h.first_at, h.tenant_id, h.handle))

    # --- run leases ---------------------------------------------------------------------------

    def renew_run_lease(self, run_id: str, *, owner: str, until: datetime) -> bool:
        """Move the lease's end if `owner` still holds the RUNNING run."""
        check_lease_owner(owner)
        with self._lock:
            found = self._runs.get(run_id)
            if found is None or found.state is not RunState.RUNNING or found.lease_owner != owner:
                return False
            self._runs[run_id] = found.leased(owner, until.astimezone(UTC))
            return True

    def take_over_run(
        self, run_id: str, *, expect_version: int, owner: str, until: datetime, at: datetime
    ) -> bool:
        """A new owner and version, only for a RUNNING run whose lease ran out by `at`."""
        check_lease_owner(owner)
        with self._lock:
            found = self._runs.get(run_id)
            if (
                found is None
                or found.version != expect_version
                or found.state is not RunState.RUNNING
                or found.lease_until is None
                or found.lease_until > at
            ):
                return False
            self._runs[run_id] = dataclasses.replace(
                found.leased(owner, until.astimezone(UTC)),
                version=expect_version + 1,
                updated_at=at.astimezone(UTC),
            )
            return True

    def expired_runs(self, *, now: datetime, limit: int) -> list[str]:
        """RUNNING runs whose lease ran out by `now`, the longest expired first."""
        with self._lock:
            found = [
                (r.lease_until, r.run_id)
                for r in self._runs.values()
                if r.state is RunState.RUNNING
                and r.lease_until is not None
                and r.lease_until <= now
            ]
        return [run_id for _, run_id in sorted(found)[: max(0, limit)]]
