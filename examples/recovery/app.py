"""The recovery application object: its downstream systems, registry, and write path.

`build_app()` is what `handrail reconcile --app examples.recovery.app:build_app` loads.
The ticket service's database file comes from the `service_db` argument, else from
the environment variable RECOVERY_SERVICE_DB, else `.handrail/recovery-tickets.db`
(where `handrail demo` puts it with the default --db). Building the app registers the
tools and opens nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from examples.recovery.service import CollectionMonitor, ResponseLoss, TicketService
from examples.recovery.tools import build_tools
from handrail import (
    AuditSink,
    Clock,
    Gate,
    Keyring,
    Reconciler,
    Registry,
    Store,
    SystemClock,
    Writes,
)

__all__ = ["DEFAULT_SERVICE_DB", "SERVICE_DB_ENV", "RecoveryApp", "build_app"]

SERVICE_DB_ENV = "RECOVERY_SERVICE_DB"
DEFAULT_SERVICE_DB = Path(".handrail") / "recovery-tickets.db"


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryApp:
    """Everything a host needs to serve, confirm, run and reconcile the recovery tools."""

    registry: Registry
    service: TicketService
    monitor: CollectionMonitor
    link: ResponseLoss
    clock: Clock

    def writes(
        self,
        store: Store,
        keyring: Keyring,
        *,
        audit: AuditSink | None = None,
        worker_id: str | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> Writes:
        """The plan / confirm / execute service over `store`, signing with `keyring`."""
        return Writes(
            self.registry,
            store,
            keyring,
            clock=self.clock,
            audit=audit,
            worker_id=worker_id,
            new_id=new_id,
        )

    def gate(self, writes: Writes, *, audit: AuditSink | None = None) -> Gate:
        """A Gate that turns the model's write proposals into plans of `writes`."""
        return Gate(self.registry, audit=audit, clock=self.clock, writes=writes)

    def reconciler(
        self,
        store: Store,
        *,
        audit: AuditSink | None = None,
        worker_id: str = "reconciler",
    ) -> Reconciler:
        """A reconciler of this app's UNKNOWN writes in `store`."""
        return Reconciler(self.registry, store, clock=self.clock, audit=audit, worker_id=worker_id)


def build_app(
    *,
    service_db: str | Path | None = None,
    audit: AuditSink | None = None,
    clock: Clock | None = None,
    new_id: Callable[[], str] | None = None,
) -> RecoveryApp:
    """Register the recovery tools over the ticket service at `service_db`.

    Without `service_db`, the file named by RECOVERY_SERVICE_DB, else the default.
    `audit` receives the registrations.
    """
    clock = clock or SystemClock()
    path = service_db or os.environ.get(SERVICE_DB_ENV) or DEFAULT_SERVICE_DB
    service = TicketService.open(path, clock=clock)
    monitor = CollectionMonitor()
    link = ResponseLoss()
    registry = Registry(audit=audit, clock=clock, new_id=new_id)
    for built in build_tools(service, monitor, link):
        registry.register(built, actor="recovery")
    return RecoveryApp(registry=registry, service=service, monitor=monitor, link=link, clock=clock)
