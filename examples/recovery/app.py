"""The recovery application object: its downstream systems, registry, and write path.

`build_app()` is what `handrail reconcile --app examples.recovery.app:build_app` loads.
The ticket service's database file comes from the `service_db` argument, else from
the environment variable RECOVERY_SERVICE_DB, else `.handrail/recovery-tickets.db`
(where `handrail demo` puts it with the default --db). Building the app registers the
tools and opens nothing.

What the model sees of results is shaped by one Shaper, shared by the app's Writes and
Gate: at most MAX_RESULT_CHARS characters of data per result, personal data and
credentials redacted, and the full result kept for people as a raw record in the same
Handrail store as plans, executions and audit (`handrail raw show REF ...`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from examples.recovery.service import (
    CollectionMonitor,
    CollectorLogs,
    ResponseLoss,
    TicketService,
)
from examples.recovery.tools import build_tools
from handrail import (
    AuditSink,
    Clock,
    Gate,
    Keyring,
    RawResults,
    Reconciler,
    Redactor,
    Registry,
    Shaper,
    Store,
    SystemClock,
    Writes,
)
from handrail.record.audit import Auditor

__all__ = [
    "DEFAULT_SERVICE_DB",
    "MAX_RESULT_CHARS",
    "RAW_MAX_BYTES",
    "SERVICE_DB_ENV",
    "RecoveryApp",
    "build_app",
]

SERVICE_DB_ENV = "RECOVERY_SERVICE_DB"
DEFAULT_SERVICE_DB = Path(".handrail") / "recovery-tickets.db"
MAX_RESULT_CHARS = 6_000
"""The most characters of JSON data the model gets from one result."""
RAW_MAX_BYTES = 32 * 1024 * 1024
"""The most bytes of a raw record kept: collector logs run to tens of MB, kept whole."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryApp:
    """Everything a host needs to serve, confirm, run and reconcile the recovery tools."""

    registry: Registry
    service: TicketService
    monitor: CollectionMonitor
    link: ResponseLoss
    logs: CollectorLogs
    clock: Clock

    def raw_results(self, store: Store, *, audit: AuditSink | None = None) -> RawResults:
        """The full results kept for people in `store`; `audit` receives every read."""
        auditor = None if audit is None else Auditor(audit, self.clock)
        return RawResults(store, self.clock, max_bytes=RAW_MAX_BYTES, auditor=auditor)

    def shaper(
        self,
        store: Store,
        *,
        audit: AuditSink | None = None,
        hash_key: bytes | None = None,
    ) -> Shaper:
        """What the model sees of results: bounded and redacted, the full ones kept in `store`.

        `hash_key` keys the hashes of values redacted by hashing; without it, a random
        key for this process. No recovery tool returns a list to page through, so the
        shaper has no cursors: a long result is cut, and the cut is reported.
        """
        return Shaper(
            redactor=Redactor(hash_key=hash_key or secrets.token_bytes(32)),
            raw=self.raw_results(store, audit=audit),
            max_chars=MAX_RESULT_CHARS,
        )

    def writes(
        self,
        store: Store,
        keyring: Keyring,
        *,
        audit: AuditSink | None = None,
        worker_id: str | None = None,
        new_id: Callable[[], str] | None = None,
        shaper: Shaper | None = None,
    ) -> Writes:
        """The plan / confirm / execute service over `store`, signing with `keyring`.

        Results are shaped by `shaper`, by default `self.shaper(store)`, which the Gate
        over these writes shares.
        """
        return Writes(
            self.registry,
            store,
            keyring,
            clock=self.clock,
            audit=audit,
            worker_id=worker_id,
            new_id=new_id,
            shaper=shaper or self.shaper(store, audit=audit),
        )

    def gate(self, writes: Writes, *, audit: AuditSink | None = None) -> Gate:
        """A Gate that turns the model's write proposals into plans of `writes`.

        It shapes results with the shaper of `writes`, so that reads and writes keep
        their raw records in the same store, under the same budget and redaction.
        """
        return Gate(
            self.registry,
            audit=audit,
            clock=self.clock,
            writes=writes,
            shaper=writes.shaper,
            max_result_chars=MAX_RESULT_CHARS,
        )

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
    logs = CollectorLogs(monitor)
    registry = Registry(audit=audit, clock=clock, new_id=new_id)
    for built in build_tools(service, monitor, link, logs):
        registry.register(built, actor="recovery")
    return RecoveryApp(
        registry=registry,
        service=service,
        monitor=monitor,
        link=link,
        logs=logs,
        clock=clock,
    )
