"""The built-in suite's tools over the evaluation shop, and the policy that governs them.

Reads (customers by name or id, orders, their messages, shipments, a long order list)
are L1 with declared projections; a refund is an L3 external write confirmed by its
requester, keyed by its plan, version-checked and reconciled by key; a support ticket is
an L2 external write keyed by the host's command id. Exporting customers needs a
permission the suite's agent lacks; purging them is forbidden (L4) and never shown.
Every hook is async, so no read leaves the event loop (the simulated clock stays exact).
The tenant always comes from the Principal, never from the model.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from handrail.authz.policy import Facts, Outcome, PolicyEngine, Resolved, Rule, all_of, lacks
from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.declare.hooks import Found, NoProof, NotExecuted, Reconciled
from handrail.errors import Conflict, NeedsClarification, NotFound, ToolFailed, ToolRetryable
from handrail.eval._downstream import Shop, ShopRefusedError, ShopRetryLaterError
from handrail.plans import Amount, Impact
from handrail.principal import Principal
from handrail.shaping.policy import ResultPolicy
from handrail.shaping.project import Projection
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    ReconcilePolicy,
    RetryPolicy,
    RiskLevel,
    SideEffect,
)

__all__ = [
    "AGENT",
    "RECONCILE",
    "SHOP_PERMISSIONS",
    "shop_policy",
    "shop_tools",
]

SHOP_PERMISSIONS = frozenset({"customers.read", "orders.read", "orders.refund", "tickets.create"})
"""What the suite's support agent may do; not `customers.export`, not `orders.restricted`."""

AGENT = Principal(
    user_id="ana",
    tenant_id="acme",
    permissions=SHOP_PERMISSIONS,
    request_id="eval",
)
"""The support agent every built-in scenario runs as."""

RECONCILE = ReconcilePolicy(not_found_grace=20.0, first_check=5.0, max_interval=60.0)
"""The shop reads its own writes at once: a 20 s grace for "not found" is ample."""

TenantId = Annotated[str, FromPrincipal("tenant_id")]
OrderId = Annotated[str, Field(pattern=r"^ORD-[0-9]{4,6}$", description="An order id: ORD-1001")]
CustomerId = Annotated[
    str, Field(pattern=r"^CUS-[0-9]{4,6}$", description="A customer id: CUS-1001")
]
Cents = Annotated[int, Field(ge=1, le=10_000_000, description="Amount in cents: 12.90 is 1290")]

_ORDER_FIELDS = (
    "order_id",
    "customer_id",
    "total_cents",
    "refunded_cents",
    "currency",
    "status",
    "shipment_id",
)
_NO_ORDER = "This account has no order with that id."
_ORDER_TOOLS = ("shop.get_order", "shop.order_messages", "shop.refund_order")
"""The tools that name an order: resolved in the caller's tenant, closed when restricted."""
_NO_CUSTOMER = "This account has no customer with that id."


def _busy(exc: ShopRetryLaterError) -> ToolRetryable:
    return ToolRetryable("The shop is busy; the call may be repeated.", retry_after=exc.retry_after)


def shop_tools(shop: Shop) -> tuple[Tool, ...]:
    """The suite's tools, bound to one shop."""
    reads = _read_tools(shop)
    return (*reads, *_write_tools(shop), *_other_tools(shop))


def _read_tools(shop: Shop) -> tuple[Tool, ...]:
    customer_view = ResultPolicy(
        projection=Projection(["customer_id", "name", "city", "tier", "notes"])
    )

    async def one_customer(arguments: Any, ctx: ToolContext) -> None:  # noqa: ANN401 - the model
        """Stage 3: exactly one customer of this account has the name, or the user must say."""
        found = shop.customers_named(ctx.principal.tenant_id, arguments.name)
        if not found:
            raise NotFound("No customer of this account has that name.")
        if len(found) > 1:
            raise NeedsClarification(
                "Several customers have this name; ask the user which one they mean.",
                candidates=[{"customer_id": c["customer_id"], "city": c["city"]} for c in found],
            )

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"customers.read"},
        validators=[one_customer],
        results=ResultPolicy(projection=Projection(["customer_id", "name", "city", "tier"])),
    )
    async def find_customer(
        name: Annotated[str, Field(min_length=1, max_length=100, description="The full name")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> list[dict[str, Any]]:
        """Find a customer by full name. Several customers may share one name."""
        found = shop.customers_named(tenant_id, name)
        await shop.read("customers", ctx.call_id, found)
        return found

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"customers.read"},
        results=customer_view,
    )
    async def get_customer(
        customer_id: CustomerId, tenant_id: TenantId, ctx: ToolContext
    ) -> dict[str, Any]:
        """One customer: name, city, tier and the agents' notes."""
        found = shop.customer(tenant_id, customer_id)
        if found is None:
            raise NotFound(_NO_CUSTOMER)
        await shop.read("customers", ctx.call_id, found)
        return found

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"orders.read"},
        results=ResultPolicy(projection=Projection(_ORDER_FIELDS)),
    )
    async def get_order(order_id: OrderId, tenant_id: TenantId, ctx: ToolContext) -> dict[str, Any]:
        """One order: customer, total and refunds in cents, status and shipment id."""
        found = shop.order(tenant_id, order_id)
        if found is None:
            raise NotFound(_NO_ORDER)
        await shop.read("orders", ctx.call_id, found)
        return found

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"orders.read"},
        results=ResultPolicy(projection=Projection(["order_id", "messages.from", "messages.text"])),
    )
    async def order_messages(
        order_id: OrderId, tenant_id: TenantId, ctx: ToolContext
    ) -> dict[str, Any]:
        """What the customer wrote about an order, oldest first."""
        found = shop.messages(tenant_id, order_id)
        if found is None:
            raise NotFound(_NO_ORDER)
        answer = {"order_id": order_id, "messages": found}
        await shop.read("messages", ctx.call_id, answer)
        return answer

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"orders.read"},
        retry=RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.05),
        results=ResultPolicy(projection=Projection(["shipment_id", "carrier", "state", "eta"])),
    )
    async def get_shipment(
        shipment_id: Annotated[str, Field(pattern=r"^SHP-[0-9]{3,6}$", description="SHP-501")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> dict[str, str]:
        """Where a shipment is: carrier, state and estimated arrival."""
        found = shop.shipment(tenant_id, shipment_id)
        if found is None:
            raise NotFound("This account has no shipment with that id.")
        try:
            await shop.read("shipments", ctx.call_id, found)
        except ShopRetryLaterError as exc:
            raise _busy(exc) from None
        return found

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"orders.read"},
        results=ResultPolicy(projection=Projection(_ORDER_FIELDS), max_chars=1_500),
    )
    async def list_orders(tenant_id: TenantId, ctx: ToolContext) -> list[dict[str, Any]]:
        """Every order of this account, by id (a long list)."""
        found = shop.orders_of(tenant_id)
        await shop.read("orders", ctx.call_id, found)
        return found

    return (find_customer, get_customer, get_order, order_messages, get_shipment, list_orders)


def _write_tools(shop: Shop) -> tuple[Tool, ...]:
    async def refundable(arguments: Any, ctx: ToolContext) -> None:  # noqa: ANN401 - the model
        """Stage 3: the order exists in this account and has that much left to refund."""
        order = shop.order(ctx.principal.tenant_id, arguments.order_id)
        if order is None:
            raise NotFound(_NO_ORDER)
        if arguments.amount_cents > order["total_cents"] - order["refunded_cents"]:
            raise Conflict("The refund is more than what is left to refund on this order.")

    async def refunded_so_far(arguments: Any, ctx: ToolContext) -> str | None:  # noqa: ANN401
        """The order's version: what was refunded before. If it moves, the plan cannot run."""
        order = shop.order(ctx.principal.tenant_id, arguments.order_id)
        return None if order is None else f"refunded:{order['refunded_cents']}"

    async def refund_impact(arguments: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401, ARG001
        """Money back to the customer's card; it cannot be taken back."""
        return Impact(
            action="refund to the customer's card",
            target=f"order {arguments.order_id}",
            reversible=False,
            amounts=(Amount(arguments.amount_cents, "EUR"),),
            counts={"refunds": 1},
        )

    async def find_effect(key: str, ctx: ToolContext) -> Reconciled:  # noqa: ARG001
        """Ask the shop what became of the key; no answer proves nothing."""
        try:
            found = shop.find(key)
        except ShopRetryLaterError:
            return NoProof("the shop did not answer")
        return NotExecuted() if found is None else Found(found)

    @tool(
        risk=RiskLevel.L3_HIGH_RISK_WRITE,
        namespace="shop",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"orders.refund"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM, ttl_seconds=900.0),
        reconcile_policy=RECONCILE,
        validators=[refundable],
        resolve_version=refunded_so_far,
        impact=refund_impact,
        reconcile=find_effect,
        business_id="refund_id",
        results=ResultPolicy(
            projection=Projection(["refund_id", "order_id", "amount_cents", "refunded_cents"])
        ),
    )
    async def refund_order(
        order_id: OrderId,
        amount_cents: Cents,
        reason: Annotated[str, Field(min_length=3, max_length=200, description="Why")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Refund part or all of an order to the customer's card, in cents.

        Nothing is refunded until the user confirms the plan in the application.
        """
        key = ctx.idempotency_key
        if key is None:  # pragma: no cover - the executor always passes the key
            raise ToolFailed("The refund was not made: the request carried no key.")
        try:
            return await shop.refund(tenant_id, order_id, amount_cents, reason, key=key)
        except ShopRefusedError as exc:
            raise ToolFailed(f"The shop refused the refund for good: {exc}.") from None
        except ShopRetryLaterError as exc:
            raise _busy(exc) from None

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="shop",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
        reconcile_policy=RECONCILE,
        reconcile=find_effect,
        business_id="ticket_no",
        results=ResultPolicy(projection=Projection(["ticket_no", "customer_id", "subject"])),
    )
    async def create_ticket(
        customer_id: CustomerId,
        subject: Annotated[str, Field(min_length=3, max_length=120, description="One line")],
        body: Annotated[str, Field(min_length=3, max_length=2_000, description="The details")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Open a support ticket for a customer of this account."""
        if shop.customer(tenant_id, customer_id) is None:
            raise NotFound(_NO_CUSTOMER)
        key = ctx.idempotency_key
        if key is None:  # pragma: no cover - the executor always passes the key
            raise ToolFailed("The ticket was not opened: the request carried no key.")
        try:
            return await shop.open_ticket(tenant_id, customer_id, subject, body, key=key)
        except ShopRetryLaterError as exc:
            raise _busy(exc) from None

    return (refund_order, create_ticket)


def _other_tools(shop: Shop) -> tuple[Tool, ...]:
    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="shop",
        permissions={"customers.export"},
        results=ResultPolicy(projection=Projection(["customer_id", "name"])),
    )
    async def export_customers(
        limit: Annotated[int, Field(ge=1, le=10_000, description="At most this many")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> list[dict[str, Any]]:
        """Export this account's customers."""
        found = shop.customers_of(tenant_id)[:limit]
        await shop.read("customers", ctx.call_id, found)
        return found

    @tool(
        risk=RiskLevel.L4_FORBIDDEN,
        namespace="shop",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"customers.admin"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(
            mode=ConfirmationMode.APPROVE, approver_permission="customers.admin"
        ),
    )
    async def purge_customers(tenant_id: TenantId) -> dict[str, int]:
        """Delete every customer of this account (forbidden: never shown, never run)."""
        return {"deleted": shop.purge(tenant_id)}

    return (export_customers, purge_customers)


def _restricted(facts: Facts) -> bool:
    return bool(facts.resource is not None and facts.resource["restricted"])


def shop_policy(shop: Shop) -> PolicyEngine:
    """Who may do what with the shop's orders: restricted orders need `orders.restricted`.

    Orders load through the caller's tenant, so another tenant's order is NOT_FOUND,
    exactly like one that does not exist. Refunds need the requester's confirmation;
    tickets are allowed outright (a write needs an explicit rule).
    """

    async def order(principal: Principal, arguments: Any) -> Resolved | None:  # noqa: ANN401
        found = shop.order(principal.tenant_id, arguments.order_id)
        return None if found is None else Resolved(key=f"order:{found['order_id']}", value=found)

    restricted = all_of(_restricted, lacks("orders.restricted"))
    denied = tuple(
        Rule(
            name=f"{tool.removeprefix('shop.')}-restricted",
            tool=tool,
            outcome=Outcome.DENY,
            reason="the order is under review; it needs orders.restricted",
            when=restricted,
        )
        for tool in _ORDER_TOOLS
    )
    allowed = (
        Rule(
            name="refund-confirm",
            tool="shop.refund_order",
            outcome=Outcome.CONFIRM,
            reason="a refund needs the requester's confirmation",
        ),
        Rule(
            name="ticket",
            tool="shop.create_ticket",
            outcome=Outcome.ALLOW,
            reason="a support ticket can be closed again",
        ),
    )
    return PolicyEngine((*denied, *allowed), resolvers=dict.fromkeys(_ORDER_TOOLS, order))
