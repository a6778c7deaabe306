"""The recovery example's tools, in the `recovery` namespace, bound to their systems.

`get_collect_status` reads why an asset stopped collecting (L1). `read_collector_log`
reads the asset's collector log (L1), a text far larger than any model should read:
it is returned as a TextStream, so the model sees a bounded, redacted excerpt (first
and last lines, the failure lines in between, the exit code) and people the whole log
behind the envelope's ref. `create_recovery_ticket`
asks the ticket service for a re-collection ticket (L2, external write): it becomes a
plan the user confirms, runs once under the plan's idempotency key, which it passes to
the service, and is reconciled by that key when its response is lost. Its business rule
re-reads the authoritative failure code rather than trusting the model's diagnosis.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from examples.recovery.service import (
    CollectionMonitor,
    CollectorLogs,
    IdempotencyKeyReusedError,
    Priority,
    ResponseLoss,
    ServiceUnavailableError,
    TicketService,
)
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Conflict,
    Found,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    NoProof,
    NotExecuted,
    NotFound,
    ReconcilePolicy,
    RiskLevel,
    SideEffect,
    StreamKind,
    TextStream,
    Tool,
    ToolContext,
    ToolFailed,
    tool,
)
from handrail.declare.hooks import Reconciled

__all__ = ["PLAN_TTL_SECONDS", "RECONCILE_POLICY", "TIMEOUT_CODE", "build_tools"]

TIMEOUT_CODE = "CONNECT_TIMEOUT"
"""The only failure a recovery ticket is for."""

PLAN_TTL_SECONDS = 300.0
"""How long a ticket plan may wait for the user's confirmation."""

RECONCILE_POLICY = ReconcilePolicy(
    not_found_grace=30.0,
    first_check=5.0,
    max_interval=600.0,
    escalate_after=6,
)
"""The ticket service reads its own writes at once; 30 s of "not found" grace is ample."""

AssetId = Annotated[
    str,
    Field(
        pattern=r"^asset-[a-z0-9-]{1,58}$",
        description="The asset's id, such as asset-lis-result",
    ),
]
TenantId = Annotated[str, FromPrincipal("tenant_id")]

_MISSING_ASSET = "This organisation has no asset with that id."


def build_tools(
    service: TicketService,
    monitor: CollectionMonitor,
    link: ResponseLoss,
    logs: CollectorLogs,
) -> tuple[Tool, ...]:
    """The recovery tools, bound to one ticket service, monitor, network link and logs."""

    def still_a_connect_timeout(arguments: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        """Stage 3: the collection system, not the model, says the failure is a timeout."""
        found = monitor.status(ctx.principal.tenant_id, arguments.asset_id)
        if found is None:
            raise NotFound(_MISSING_ASSET)
        if found.reason_code != TIMEOUT_CODE:
            # Runs before authorization: the actual code is not told to the caller.
            raise Conflict(
                "The asset's current failure is not a connection timeout, and a recovery "
                "ticket is only for connection timeouts. Read the status again first."
            )

    def status_version(arguments: Any, ctx: ToolContext) -> str | None:  # noqa: ANN401
        """The failure the plan is based on; if it changes, the plan cannot run."""
        found = monitor.status(ctx.principal.tenant_id, arguments.asset_id)
        return None if found is None else found.version

    def ticket_impact(arguments: Any, ctx: ToolContext) -> Impact:  # noqa: ANN401, ARG001
        """One ticket for one asset; a ticket can be closed again, so it is reversible."""
        return Impact(
            action="create recovery ticket",
            target=arguments.asset_id,
            reversible=True,
            counts={"tickets": 1},
            notes=(f"priority {arguments.priority}", f"reason: {arguments.reason}"),
        )

    def find_ticket(key: str, ctx: ToolContext) -> Reconciled:
        """Ask the ticket service what became of the key."""
        try:
            ticket = service.find(key)
        except ServiceUnavailableError:
            return NoProof("the ticket service did not answer")
        if ticket is None:
            return NotExecuted()
        if ticket.tenant_id != ctx.principal.tenant_id:  # pragma: no cover - keys hold the tenant
            return NoProof("the key names another tenant's ticket; a person must look")
        return Found(ticket.view())

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="recovery", permissions={"assets.read"})
    def get_collect_status(asset_id: AssetId, tenant_id: TenantId) -> dict[str, Any]:
        """Why an asset stopped collecting data.

        Returns the status, the failure's reason code (such as CONNECT_TIMEOUT), when
        it occurred, the ids of the log and alarm entries that show it, and whether
        re-collecting may help.
        """
        found = monitor.status(tenant_id, asset_id)
        if found is None:
            raise NotFound(_MISSING_ASSET)
        return found.to_json()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="recovery", permissions={"assets.read"})
    def read_collector_log(asset_id: AssetId, tenant_id: TenantId) -> TextStream:
        """The log of the asset's data collector, to see how and when collection failed.

        Logs are long: you get the first and last lines, the failure lines from the
        part in between (exceptions, exit codes) and how many lines there are in all.
        Sensitive values in it are redacted.
        """
        lines = logs.lines(tenant_id, asset_id)
        if lines is None:
            raise NotFound(_MISSING_ASSET)
        return TextStream(lines, kind=StreamKind.LOG, media_type="text/plain; charset=utf-8")

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="recovery",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        confirmation=ConfirmationPolicy(
            mode=ConfirmationMode.CONFIRM, ttl_seconds=PLAN_TTL_SECONDS
        ),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        reconcile_policy=RECONCILE_POLICY,
        validators=[still_a_connect_timeout],
        resolve_version=status_version,
        impact=ticket_impact,
        reconcile=find_ticket,
        business_id="ticket_no",
    )
    def create_recovery_ticket(
        asset_id: AssetId,
        reason: Annotated[
            str,
            Field(min_length=5, max_length=500, description="Why, citing the evidence ids"),
        ],
        priority: Annotated[Priority, Field(description="How urgent the re-collection is")],
        ctx: ToolContext,
    ) -> dict[str, str]:
        """Open a ticket asking operations to re-collect an asset after a connection timeout.

        Only for assets whose status shows CONNECT_TIMEOUT. Nothing is created until
        the user confirms the plan in the application; tell them what it will do.
        """
        key = ctx.idempotency_key
        if key is None:  # pragma: no cover - the executor always passes the key
            raise ToolFailed("The ticket was not created: the request carried no key.")
        try:
            ticket = service.create(
                key,
                ctx.principal.tenant_id,
                asset_id,
                reason,
                priority,
                lose_response=link.consume(),
            )
        except IdempotencyKeyReusedError:
            raise ToolFailed(
                "The ticket service holds this request's key for a different ticket; "
                "nothing was created."
            ) from None
        return ticket.view()

    return (get_collect_status, read_collector_log, create_recovery_ticket)
