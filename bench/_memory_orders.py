"""The service benchmark's own tool: an order looked up in memory, so the load measures Handrail.

`bench.get_order` takes the bare endpoint's argument (an `order_id` with the same
pattern) and answers from a dict: no database, no worker thread (it is async). The
call still goes through every stage of the gate and its audit; only the tool's own
work is taken out of the numbers.
"""

from typing import Annotated, Any

from pydantic import Field

from handrail import FromPrincipal, NotFound, Registry, RiskLevel, tool

__all__ = ["MEMORY_TOOL", "memory_registry"]

MEMORY_TOOL = "bench__get_order"
"""The tool's name on the wire (Anthropic): namespace `bench`, tool `get_order`."""

OrderId = Annotated[str, Field(pattern=r"^ORD-[0-9]{4,8}$", description="ORD-1001, say")]
TenantId = Annotated[str, FromPrincipal("tenant_id")]


def memory_registry() -> Registry:
    """A registry holding `bench.get_order` over 100 orders of tenant `acme`."""
    orders = {
        ("acme", f"ORD-{n}"): {
            "order_id": f"ORD-{n}",
            "amount_cents": 1999 + n,
            "currency": "EUR",
            "status": "paid",
            "owner_id": "alice",
        }
        for n in range(1001, 1101)
    }

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="bench", permissions={"order.read"})
    async def get_order(order_id: OrderId, tenant_id: TenantId) -> dict[str, Any]:
        """One order of the caller's tenant, from memory."""
        found = orders.get((tenant_id, order_id))
        if found is None:
            raise NotFound("This account has no order with that number.")
        return found

    registry = Registry()
    registry.register(get_order, actor="bench")
    return registry
