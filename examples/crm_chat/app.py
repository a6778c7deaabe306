"""The CRM chat application: four tools over the CRM, and who may use them.

Three reads scoped to the tenant (`crm.find_customer`, `crm.get_customer`,
`crm.list_orders`): the tenant always comes from the Principal (`FromPrincipal` or
`ctx.principal`), never from the model's arguments, so another tenant's rows are
never visible; a customer of another tenant is NOT_FOUND exactly like a missing one.
One write, `crm.update_email`, that a person confirms: its plan binds the customer's
version (`resolve_version`), shows people its `impact`, runs once under the plan's
idempotency key (which the CRM deduplicates by), can be checked by `reconcile`, and
names the CRM's change id (`business_id`).

`build_registry()` is what `handrail plans confirm --app examples.crm_chat.app:build_registry`
loads; the CRM's file is `$CRM_CHAT_DB` (default `.handrail/crm_chat.db`).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import Field

from examples.crm_chat.crm import DEFAULT_DATABASE, Crm, StaleVersionError
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Found,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    Kind,
    NoProof,
    NotExecuted,
    NotFound,
    Principal,
    RedactionAction,
    RedactionPolicy,
    Registry,
    ResultPolicy,
    RiskLevel,
    SideEffect,
    Tool,
    ToolContext,
    VersionConflict,
    tool,
)

__all__ = ["CRM_ENV", "PERMISSIONS", "build_registry", "build_tools", "crm_from_env", "crm_user"]

CRM_ENV = "CRM_CHAT_DB"
"""The environment variable naming the CRM's SQLite file."""

PERMISSIONS = frozenset({"customers.read", "orders.read", "customers.write"})
"""What a CRM user holds; authentication grants it, never the model."""

CustomerId = Annotated[str, Field(pattern=r"^c-\d{1,8}$", description="A customer id, as c-1")]
Tenant = Annotated[str, FromPrincipal("tenant_id")]

# The model reads addresses back to the user: e-mail addresses stay visible to it.
_KEEP_EMAIL = ResultPolicy(redaction=RedactionPolicy(actions={Kind.EMAIL: RedactionAction.KEEP}))


def crm_from_env() -> Crm:
    """The CRM at `$CRM_CHAT_DB`, or at the default path."""
    return Crm(os.environ.get(CRM_ENV) or DEFAULT_DATABASE)


def crm_user(tenant: str, user: str) -> Principal:
    """The principal of a signed-in CRM user (the host's authentication stands behind it)."""
    return Principal(user_id=user, tenant_id=tenant, permissions=PERMISSIONS)


def build_tools(crm: Crm) -> tuple[Tool, ...]:
    """The CRM's four tools, bound to one CRM."""

    def customer_exists(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401 - the args model
        """Stage 3: the customer must be one of the principal's own tenant."""
        if crm.customer(ctx.principal.tenant_id, args.customer_id) is None:
            raise NotFound("There is no such customer. Find the customer by name first.")

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="crm", permissions={"customers.read"})
    def find_customer(
        name: Annotated[str, Field(min_length=2, max_length=80, description="Part of the name")],
        tenant: Tenant,
    ) -> list[dict[str, str]]:
        """Customers whose name contains the words given: their ids and names."""
        return crm.find(tenant, name)

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="crm",
        permissions={"customers.read"},
        validators=[customer_exists],
        results=_KEEP_EMAIL,
    )
    def get_customer(customer_id: CustomerId, tenant: Tenant) -> dict[str, Any]:
        """One customer: name and e-mail address."""
        found = crm.customer(tenant, customer_id)
        if found is None:  # removed since stage 3 looked
            raise NotFound("There is no such customer.")
        return {k: found[k] for k in ("customer_id", "name", "email")}

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="crm",
        permissions={"orders.read"},
        validators=[customer_exists],
    )
    def list_orders(customer_id: CustomerId, tenant: Tenant) -> list[dict[str, Any]]:
        """A customer's orders: id, total in minor units (cents), currency and status."""
        return crm.orders(tenant, customer_id)

    def current_version(args: Any, ctx: ToolContext) -> str | None:  # noqa: ANN401
        """The customer's version, bound into the plan and checked again right before it runs."""
        found = crm.customer(ctx.principal.tenant_id, args.customer_id)
        return None if found is None else str(found["version"])

    def what_changes(args: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401
        """What the person confirming sees."""
        found = crm.customer(ctx.principal.tenant_id, args.customer_id) or {}
        return Impact(
            action="change e-mail address",
            target=f"{found.get('name', '?')} ({args.customer_id})",
            reversible=True,
            notes=(f"from {found.get('email', '?')} to {args.email}",),
        )

    def find_change(key: str, ctx: ToolContext) -> Found | NotExecuted | NoProof:  # noqa: ARG001
        """Asked by the reconciler for a write left UNKNOWN: did the CRM make this change?"""
        change = crm.find_change(key)
        return NotExecuted() if change is None else Found(change)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="crm",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"customers.write"},
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        validators=[customer_exists],
        resolve_version=current_version,
        impact=what_changes,
        reconcile=find_change,
        business_id="change_id",
        results=_KEEP_EMAIL,
    )
    def update_email(
        ctx: ToolContext,
        customer_id: CustomerId,
        email: Annotated[str, Field(max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")],
    ) -> dict[str, str]:
        """Change a customer's e-mail address. The user confirms it in the application first."""
        if ctx.idempotency_key is None:
            msg = "update_email runs only from a plan, under its idempotency key"
            raise RuntimeError(msg)
        try:
            return crm.change_email(
                ctx.idempotency_key,
                ctx.principal.tenant_id,
                customer_id,
                email,
                expected_version=ctx.expected_version,  # compared where the CRM writes
            )
        except StaleVersionError:
            raise VersionConflict(
                "The customer changed since the plan; nothing was written."
            ) from None

    return (find_customer, get_customer, list_orders, update_email)


def build_registry() -> Registry:
    """A registry of the CRM's tools over the CRM at `$CRM_CHAT_DB` (for `handrail --app`)."""
    registry = Registry()
    for each in build_tools(crm_from_env()):
        registry.register(each)
    return registry
