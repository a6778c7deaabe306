"""The bookstore's tools, declared with `handrail.tool` in the `bookstore` namespace.

The tenant of every query comes from the Principal, through `FromPrincipal` or
`ctx.principal`; no tool has a tenant parameter the model could fill. One L4 tool is
registered to show that forbidden tools are never exposed and never run.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from examples.bookstore.data import BookstoreDb, Genre
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    NotFound,
    RiskLevel,
    SideEffect,
    Tool,
    ToolContext,
    tool,
)

__all__ = ["SearchFilters", "build_tools"]

Isbn = Annotated[
    str,
    Field(pattern=r"^97[89][0-9]{10}$", description="ISBN-13, digits only: 9780141439518"),
]
OrderId = Annotated[
    str,
    Field(pattern=r"^ORD-[0-9]{4,8}$", description="The order number, such as ORD-1001"),
]
TenantId = Annotated[str, FromPrincipal("tenant_id")]


class SearchFilters(BaseModel):
    """Optional narrowing of a catalogue search."""

    model_config = ConfigDict(extra="forbid")

    genre: Genre | None = None
    in_stock: bool = Field(default=False, description="Only books with copies on hand")


def build_tools(db: BookstoreDb) -> tuple[Tool, ...]:
    """The bookstore's tools, bound to one database."""

    def isbn_in_catalogue(arguments: Any, ctx: ToolContext) -> None:  # noqa: ANN401 - model
        """Stage 3: the ISBN must be in the catalogue of the principal's own tenant."""
        if not db.for_tenant(ctx.principal.tenant_id).has_book(arguments.isbn):
            raise NotFound("No book with that ISBN is in this store's catalogue. Search first.")

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="bookstore")
    def search_books(
        query: Annotated[
            str,
            Field(min_length=1, max_length=100, description="Words from a title or author"),
        ],
        tenant_id: TenantId,
        limit: Annotated[int, Field(ge=1, le=20, description="At most this many books")] = 5,
        filters: SearchFilters | None = None,
    ) -> list[dict[str, Any]]:
        """Search this store's catalogue by title or author; returns ISBNs and prices."""
        chosen = filters or SearchFilters()
        return db.for_tenant(tenant_id).search(
            query,
            limit=limit,
            genre=chosen.genre,
            in_stock=chosen.in_stock,
        )

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="bookstore",
        permissions={"inventory.read"},
        validators=[isbn_in_catalogue],
    )
    def check_inventory(isbn: Isbn, ctx: ToolContext) -> dict[str, Any]:
        """How many copies of a book this store has on hand, and on which shelf."""
        found = db.for_tenant(ctx.principal.tenant_id).stock(isbn)
        if found is None:
            raise NotFound("No book with that ISBN is in this store's catalogue. Search first.")
        return found

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="bookstore", permissions={"orders.read"})
    def order_status(order_id: OrderId, tenant_id: TenantId) -> dict[str, Any]:
        """The status of one of this store's orders, by order number."""
        # Looked up only after authorization, so that a caller without orders.read
        # cannot learn which order numbers exist.
        found = db.for_tenant(tenant_id).order(order_id)
        if found is None:
            raise NotFound("This store has no order with that number.")
        return found

    @tool(
        risk=RiskLevel.L4_FORBIDDEN,
        namespace="bookstore",
        side_effect=SideEffect.LOCAL_WRITE,
        permissions={"orders.admin"},
        confirmation=ConfirmationPolicy(
            mode=ConfirmationMode.APPROVE,
            approver_permission="orders.admin",
            distinct_approvers=2,
        ),
    )
    def delete_all_orders(tenant_id: TenantId) -> dict[str, int]:
        """Delete every order of this store. Registered for the record; never exposed."""
        return {"deleted": db.for_tenant(tenant_id).delete_all_orders()}

    return (search_books, check_inventory, order_status, delete_all_orders)
