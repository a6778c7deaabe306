"""The payments application object: its database, registry, policy and a Gate factory.

`build_app()` is what `handrail --app examples.payments:build_app` loads. Building the
app registers the tools and builds the policy; the database file is touched only
when a query runs or `database.reset()` is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from examples.payments.data import PaymentsDb
from examples.payments.policy import build_policy
from examples.payments.tools import build_tools
from handrail import AuditSink, Clock, Gate, Registry, SystemClock
from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import PolicyEngine

__all__ = ["TENANTS", "PaymentsApp", "build_app"]

TENANTS = ("acme", "globex")
"""The tenants whose sample data `PaymentsDb.reset` loads."""

DEFAULT_DATABASE = Path(".handrail") / "payments.db"


@dataclass(frozen=True, kw_only=True, slots=True)
class PaymentsApp:
    """Everything a host needs to serve the payments tools to a model."""

    registry: Registry
    policy: PolicyEngine
    database: PaymentsDb
    clock: Clock

    def gate(
        self,
        *,
        audit: AuditSink | None = None,
        new_id: Callable[[], str] | None = None,
        guard: ConversationGuard | None = None,
    ) -> Gate:
        """A Gate over this app's registry and policy, auditing to `audit`.

        Pass a `ConversationGuard` (and a conversation id per call) to refuse bypass
        attempts and stop conversations that keep being denied.
        """
        return Gate(
            self.registry,
            audit=audit,
            clock=self.clock,
            new_id=new_id,
            policy=self.policy,
            guard=guard,
        )


def build_app(
    *,
    database: str | Path = DEFAULT_DATABASE,
    audit: AuditSink | None = None,
    clock: Clock | None = None,
    new_id: Callable[[], str] | None = None,
) -> PaymentsApp:
    """Register the payments tools and build the policy over the database at `database`."""
    clock = clock or SystemClock()
    db = PaymentsDb.open(database)
    registry = Registry(audit=audit, clock=clock, new_id=new_id)
    for built in build_tools(db):
        registry.register(built, actor="payments")
    return PaymentsApp(registry=registry, policy=build_policy(db), database=db, clock=clock)
