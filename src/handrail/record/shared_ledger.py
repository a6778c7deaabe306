"""The secret-handle ledger shared by the workers of one service, through the store.

Owns `SharedSecretLedger`: a `SecretLedger` that notes in the store which handle was
handed out for which tenant (the name only: never a value, a hash or any other form of
a secret), and that learns, on `refresh`, the handles any worker noted, reading each
value again from this worker's own `SecretProvider`. So every worker scrubs the values
any worker handed out. It never stores or logs a value.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from handrail.credentials import MIN_SECRET_LENGTH, SecretLedger, SecretProvider

if TYPE_CHECKING:
    from handrail.clock import Clock
    from handrail.store.base import Store

__all__ = ["SharedSecretLedger"]


class SharedSecretLedger(SecretLedger):
    """A SecretLedger whose handed-out handles every worker sharing the store learns.

    `hand_out` notes the tenant and handle in the store before the value reaches the
    tool (once per pair and process; a failing store refuses the value, StoreError),
    so a handle is noted before anything could show its value. `refresh` records the
    current value, from this worker's `provider`, of every handle noted by any worker:
    call it before serving and then periodically (`handrail.server.shared` does both).
    Values are read again at each refresh, so a rotated value is learned too; values
    once recorded stay recorded, as in every ledger. Without a provider, a worker
    scrubs only what it handed out itself, and `refresh` learns nothing.
    """

    def __init__(self, store: Store, *, provider: SecretProvider | None, clock: Clock) -> None:
        super().__init__()
        self._store = store
        self._provider = provider
        self._clock = clock
        self._noted: set[tuple[str, str]] = set()
        self._noting = threading.Lock()

    def hand_out(self, handle: str, value: str, *, tenant_id: str) -> None:
        """Note (tenant, handle) in the store unless noted already, then record the value."""
        key = (tenant_id, handle)
        if key not in self._noted:
            with self._noting:
                if key not in self._noted:
                    self._store.note_secret_handle(tenant_id, handle, at=self._clock.now())
                    self._noted.add(key)
        self.record(handle, value)

    def refresh(self) -> int:
        """Record the current value of every handle any worker noted; how many are known.

        Blocks on the store and the provider: run it in a worker thread from async code.
        A handle whose value this provider lacks (or holds too short to scrub) is
        skipped and tried again at the next refresh.
        """
        provider = self._provider
        if provider is None:
            return 0
        known = 0
        for handed in self._store.list_secret_handles():
            value = provider.get(handed.handle, tenant_id=handed.tenant_id)
            if value is None or len(value) < MIN_SECRET_LENGTH:
                continue
            self.record(handed.handle, value)
            with self._noting:
                self._noted.add((handed.tenant_id, handed.handle))
            known += 1
        return known

    def __repr__(self) -> str:
        return f"Shared{super().__repr__()}"
