"""The payments app's tools, declared with `handrail.tool` in the `payments` namespace.

The tenant comes from the Principal through `FromPrincipal`, the data scope from the
Principal in the ToolContext; no tool has a parameter the model could fill with
either. Amounts are integer cents. Whether a call may run (and with whose agreement)
is the policy's business (`examples.payments.policy`), not the tools'.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from examples.payments.data import PaymentsDb, Region, Segment
from handrail import (
    Amount,
    ConfirmationMode,
    ConfirmationPolicy,
    Conflict,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    NotFound,
    RiskLevel,
    SideEffect,
    Tool,
    ToolContext,
    tool,
)

__all__ = ["CustomerFilter", "build_tools"]

OrderId = Annotated[
    str,
    Field(pattern=r"^ORD-[0-9]{4,8}$", description="The order number, such as ORD-1001"),
]
CustomerId = Annotated[
    str,
    Field(pattern=r"^CUS-[0-9]{5,8}$", description="A customer id, such as CUS-10001"),
]
Cents = Annotated[
    int,
    Field(ge=1, le=10**12, description="An amount in cents (minor units): 100.00 EUR is 10000"),
]
TenantId = Annotated[str, FromPrincipal("tenant_id")]

_NO_ORDER = "This account has no order with that number."


class CustomerFilter(BaseModel):
    """Which customers an export covers; both fields narrow it."""

    model_config = ConfigDict(extra="forbid")

    segment: Segment | None = None
    region: Region | None = None


def build_tools(db: PaymentsDb) -> tuple[Tool, ...]:
    """The payments tools, bound to one database."""

    def refund_target(arguments: Any, ctx: ToolContext) -> dict[str, Any] | None:  # noqa: ANN401
        scoped = db.scoped(tenant_id=ctx.principal.tenant_id, data_scope=ctx.principal.data_scope)
        return scoped.order(arguments.order_id)

    def refunded_so_far(arguments: Any, ctx: ToolContext) -> str | None:  # noqa: ANN401
        """The order's version: what was refunded before. If it moves, the plan cannot run."""
        order = refund_target(arguments, ctx)
        return None if order is None else f"refunded:{order['refunded_cents']}"

    def refund_impact(arguments: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401
        """Money back to the customer's card: the amount, in the order's currency."""
        order = refund_target(arguments, ctx)
        currency = "EUR" if order is None else str(order["currency"])
        return Impact(
            action="refund to the customer's card",
            target=f"order {arguments.order_id}",
            reversible=False,
            amounts=(Amount(arguments.amount_cents, currency),),
            counts={"refunds": 1},
            notes=(f"reason: {arguments.reason}",) if arguments.reason else (),
        )

    def notify_impact(arguments: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401, ARG001
        """A message cannot be taken back once sent."""
        return Impact(
            action="send a message to customers",
            target=f"{len(arguments.recipients)} customer(s) of this account",
            reversible=False,
            counts={"recipients": len(arguments.recipients)},
            notes=(f"message: {arguments.message}",),
        )

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="payments", permissions={"order.read"})
    def get_order(order_id: OrderId, tenant_id: TenantId, ctx: ToolContext) -> dict[str, Any]:
        """One order: amount and refunds in cents, status, owner."""
        found = db.scoped(tenant_id=tenant_id, data_scope=ctx.principal.data_scope).order(order_id)
        if found is None:
            raise NotFound(_NO_ORDER)
        return found

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="payments", permissions={"order.read"})
    def order_timeline(
        order_id: OrderId,
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> list[dict[str, Any]]:
        """What happened to one order, oldest first."""
        return db.scoped(tenant_id=tenant_id, data_scope=ctx.principal.data_scope).events(order_id)

    @tool(
        risk=RiskLevel.L3_HIGH_RISK_WRITE,
        namespace="payments",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"order.refund"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(
            mode=ConfirmationMode.APPROVE,
            approver_permission="refund.approve",
            distinct_approvers=2,
        ),
        resolve_version=refunded_so_far,
        impact=refund_impact,
    )
    def refund_order(
        order_id: OrderId,
        amount_cents: Cents,
        tenant_id: TenantId,
        ctx: ToolContext,
        reason: Annotated[str, Field(max_length=200, description="Why, for the record")] = "",
    ) -> dict[str, Any]:
        """Refund part or all of an order to the customer's card, in cents."""
        del reason  # kept with the plan and the audit trail, not by the ledger
        ledger = db.scoped(tenant_id=tenant_id, data_scope=ctx.principal.data_scope)
        after = ledger.refund(order_id, amount_cents)
        if after is None:
            if ledger.order(order_id) is None:
                raise NotFound(_NO_ORDER)
            raise Conflict("The refund is more than what is left to refund on this order.")
        return after

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="payments", permissions={"customers.export"})
    def export_customers(
        limit: Annotated[int, Field(ge=1, le=100_000, description="At most this many rows")],
        tenant_id: TenantId,
        ctx: ToolContext,
        filters: CustomerFilter | None = None,
    ) -> list[dict[str, Any]]:
        """Export this account's customers (id, name, segment), by id."""
        chosen = filters or CustomerFilter()
        ledger = db.scoped(tenant_id=tenant_id, data_scope=ctx.principal.data_scope)
        return ledger.customers(segment=chosen.segment, region=chosen.region, limit=limit)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="payments",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"customers.notify"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        impact=notify_impact,
    )
    def notify_customers(
        recipients: Annotated[list[CustomerId], Field(min_length=1, max_length=1_000)],
        message: Annotated[str, Field(min_length=1, max_length=500)],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> dict[str, int]:
        """Send a short message to customers of this account, by customer id."""
        ledger = db.scoped(tenant_id=tenant_id, data_scope=ctx.principal.data_scope)
        return {"queued": ledger.notify(recipients, message)}

    return (get_order, order_timeline, refund_order, export_customers, notify_customers)
