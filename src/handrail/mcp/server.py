"""GatedServer: a Handrail application's registry served as MCP tools, through the Gate.

`tools/list` is `registry.exposed(principal)`; every `tools/call` is one `gate.handle`
(the four checks, the risk decision, a plan for a write, shaping) and its envelope
mapped to a CallToolResult. Who calls comes from a PrincipalSource, never from the
request's arguments; with no principal nothing is listed and nothing runs. The SDK's
low-level server does the protocol; this module adds no protocol code of its own.

Tool search and skills: each session's `tools/list` is the core set plus the deferred
tools its `search_tools` calls found, narrowed by the skills it loaded (`_toolset`);
a change is told to that session alone by `notifications/tools/list_changed`.

Beyond list and call: `notifications/tools/list_changed` after every registry change,
progress notifications for tools that report progress (when the client asked),
cancellation of a running call (the SDK cancels the handler; the gate and the write
rules decide what that means), and, for a write that needs confirmation, a URL-mode
elicitation offering the application's confirmation page where the client supports it.

Trace context: `TraceContext` (in place of the SDK's own middleware) makes the
`traceparent` of a request's `params._meta` current while it is handled, so the gate's
spans of a call are children of the client's span; over Streamable HTTP,
`http_app(telemetry=...)` also reads the request's headers. Nothing here reads or writes it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import uuid
import weakref
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from datetime import date
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from handrail.app import Handrail
from handrail.calls import ToolCall
from handrail.context import ProgressReporter, reporting_progress
from handrail.declare.exposure import Exposure
from handrail.envelope import Envelope
from handrail.errors import ErrorCode, HandrailError
from handrail.mcp._definitions import tool_definitions
from handrail.mcp._guards import (
    LISTENS_PER_PRINCIPAL,
    MAX_RUNNING_CALLS,
    RunningCalls,
    busy,
    contained,
    refusal,
)
from handrail.mcp._results import call_result
from handrail.mcp._toolset import SessionToolsets
from handrail.mcp._trace_context import TraceContext
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.shaping.marking import MODEL_INSTRUCTIONS, DataMarker
from handrail.writes.service import proposal_envelope

if TYPE_CHECKING:
    from handrail.loop._toolset import SkillSource

__all__ = ["GatedServer", "PrincipalSource", "fixed_principal"]

PrincipalSource: TypeAlias = Callable[[], Principal | None]
"""Who is calling, asked once per request; None refuses the request and runs nothing."""

_log = logging.getLogger(__name__)

PROVIDER: Final = "mcp"
"""The `provider` of every ToolCall built from a `tools/call`."""

_MAX_PROGRESS_MESSAGE: Final = 200
_ELICITATION_TIMEOUT: Final = 300.0
_OPEN_PLANS: Final = frozenset({PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION})
_CONFIRM_MESSAGE: Final = (
    "A write was planned and needs your confirmation before it runs. Open the page to "
    "review what it will do and confirm or reject it."
)
_CONFIRM_INPUT: Final = "confirm"
_NO_PRINCIPAL: Final = (
    "The caller could not be identified, so nothing was run. Ask the operator to "
    "configure who this server acts for."
)


def fixed_principal(principal: Principal) -> PrincipalSource:
    """The PrincipalSource of a server that always acts for one principal (stdio)."""

    def source() -> Principal:
        return principal

    return source


class _Server(Server[Any]):
    """The SDK's low-level server, announcing that its tool list can change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The SDK's options, with `tools.listChanged` on unless told otherwise."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class GatedServer:
    """An MCP server over one Handrail application: every call through its gate.

    `principal` is asked on every request (over stdio `fixed_principal(...)`, over
    HTTP the authenticated caller). `confirm_url(plan_id)` is the address of the
    application's confirmation page for a plan; when given, a client that supports
    URL-mode elicitation is offered it for a write that needs confirmation (the
    answer never carries a token either way). `command_id(ctx)` gives the host's id
    of the user's intent behind a request, the key of an unconfirmed COMMAND_ID write
    (never read from the arguments, which the model writes); without it such writes
    are refused RISK_BLOCKED. `timeout` is each call's budget in seconds (the gate's
    default when None; a tool's own timeout still caps it). `new_id` draws the unique
    part of each call id (a random uuid by default); `marker` marks result text as data.
    `state_key` seals the request state of a 2026-era confirmation round trip (32
    random bytes per server by default, so a round trip ends with its process).
    `max_running_calls` bounds the calls one principal has running at once, over all
    its connections; one more is refused RATE_LIMITED without running. `skills` is the
    host's skill library: a session's `load_skill` narrows its tools to a skill the
    library holds (`_toolset`); without it skills narrow nothing.
    """

    def __init__(
        self,
        app: Handrail,
        *,
        principal: PrincipalSource,
        name: str = "handrail",
        confirm_url: Callable[[str], str] | None = None,
        command_id: Callable[[ServerRequestContext[Any]], str | None] | None = None,
        version: str = "",
        instructions: str | None = MODEL_INSTRUCTIONS,
        new_id: Callable[[], str] | None = None,
        marker: DataMarker | None = None,
        elicitation_timeout: float = _ELICITATION_TIMEOUT,
        timeout: float | None = None,
        state_key: bytes | None = None,
        max_running_calls: int = MAX_RUNNING_CALLS,
        skills: SkillSource | None = None,
    ) -> None:
        self._app = app
        self._principal = principal
        self._confirm_url = confirm_url
        self._command_id = command_id
        self._new_id = new_id or _call_ids()
        self._marker = marker or DataMarker()
        self._toolsets = SessionToolsets(
            app.registry, self._marker, Auditor(app.audit, app.clock), skills=skills
        )
        self._elicitation_timeout = elicitation_timeout
        self._timeout = timeout
        self._running = RunningCalls(max_running_calls)
        self._listens = RunningCalls(LISTENS_PER_PRINCIPAL)
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._server = _Server(
            name,
            version=version,
            instructions=instructions,
            on_list_tools=contained(self._list_tools),
            on_call_tool=contained(self._call_tool),
            on_subscriptions_listen=self._subscriptions_listen,
            get_tool_input_schema=_no_header_parameters,
        )
        # In place of the SDK's default (its OpenTelemetry middleware, which names spans
        # after the client's tool name, unbounded): the `_meta` trace context alone.
        self._server.middleware = [TraceContext()]
        # 2026-era confirmation offers travel as InputRequiredResult: their request state
        # (a plan id) is sealed, bound to the request, this server and the principal.
        # Without a confirmation page there are no offers, so no state to unseal: the
        # boundary (a cost on every request) is left out and any state is refused.
        if confirm_url is not None:
            security = RequestStateSecurity(
                keys=[state_key or os.urandom(32)],
                ttl=elicitation_timeout,
                bind_principal=self._principal_claim,
            )
            self._server.middleware.append(RequestStateBoundary(security, default_audience=name))
        self._server.add_notification_handler(
            "notifications/initialized",
            types.NotificationParams,
            self._initialized,
        )
        # Handshake-era connections, each with the loop it is served on; a closed one
        # is dropped with its last reference.
        self._connections: weakref.WeakKeyDictionary[Connection, asyncio.AbstractEventLoop] = (
            weakref.WeakKeyDictionary()
        )
        self._loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._tasks: set[asyncio.Task[None]] = set()
        # Exposure of each (tenant, permissions), valid for one registry generation.
        self._generations = itertools.count(1)
        self._generation = 0
        self._exposures: dict[tuple[str, frozenset[str]], tuple[tuple[int, date], Exposure]] = {}
        self._unsubscribe = app.registry.subscribe(self._registry_changed)

    @property
    def lowlevel(self) -> Server[Any]:
        """The SDK server object, for a transport (stdio, Streamable HTTP, in-memory)."""
        return self._server

    @property
    def app(self) -> Handrail:
        """The application whose gate every call goes through."""
        return self._app

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it hangs up."""
        async with stdio_server() as (read_stream, write_stream):
            await self._server.run(
                read_stream,
                write_stream,
                self._server.create_initialization_options(),
            )

    def close(self) -> None:
        """Stop following the registry and end open `subscriptions/listen` streams."""
        self._unsubscribe()
        self._listen.close()

    # --- tools/list ------------------------------------------------------------------------------

    async def _list_tools(
        self,
        ctx: ServerRequestContext[Any],
        params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        """The tools this principal may see, all on one page; none without a principal."""
        del params  # one page holds every tool; the caller is the principal source's
        self._loops.add(asyncio.get_running_loop())
        principal = self._caller()
        if principal is None:
            return types.ListToolsResult(tools=[])
        exposure = self._session_exposure(ctx, principal)
        return types.ListToolsResult(tools=tool_definitions(exposure.included))

    # --- tools/call ------------------------------------------------------------------------------

    async def _call_tool(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One call through the gate, as the principal of this request.

        Refused unidentified without a principal, and busy when the principal has
        `max_running_calls` running already; nothing runs either way.
        """
        self._loops.add(asyncio.get_running_loop())
        call = ToolCall(
            id=f"{PROVIDER}-{ctx.request_id}-{self._new_id()}",
            name=params.name,
            arguments=params.arguments,
            provider=PROVIDER,
        )
        principal = self._caller()
        if principal is None:
            return call_result(_unidentified(call), self._marker)
        if not self._running.enter(principal):
            return call_result(busy(call), self._marker)
        try:
            return await self._answer(ctx, params, call, principal)
        finally:
            self._running.leave(principal)

    async def _answer(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        call: ToolCall,
        principal: Principal,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The answer to one admitted call: a retry's plan, or the gate's envelope."""
        if params.request_state is not None:
            if self._confirm_url is None:
                return call_result(_unsealed_state(call), self._marker)
            # A 2026-era retry after the confirmation page was offered: the same plan,
            # never a second one. The state was sealed by this server for this request.
            return call_result(
                await self._resumed(call, principal, params.request_state), self._marker
            )
        exposure = self._session_exposure(ctx, principal)
        asked = progress_token_from_params(ctx.params) is not None
        with reporting_progress(_progress_to(ctx)) if asked else nullcontext():
            envelope = await self._app.gate.handle(
                call,
                principal,
                timeout=self._timeout,
                exposure=exposure,
                command_id=None if self._command_id is None else self._command_id(ctx),
            )
        if self._toolsets.follow(_session_of(ctx), principal, call, envelope):
            # This session's list changed: told to it alone (its standalone channel).
            await ctx.session.send_tool_list_changed()
        # Only the requester's own confirmation: approvals are other people's to give.
        if envelope.error_type is ErrorCode.NEEDS_CONFIRMATION:
            offer = await self._offer_confirmation(ctx, envelope)
            if offer is not None:
                return offer
        return call_result(envelope, self._marker)

    def _caller(self) -> Principal | None:
        """This request's principal; None (refused) when the source fails, which is logged."""
        try:
            return self._principal()
        except Exception:  # noqa: BLE001 - fail closed: an unidentified caller runs nothing
            _log.exception("the principal source failed; the request is refused")
            return None

    def _session_exposure(self, ctx: ServerRequestContext[Any], principal: Principal) -> Exposure:
        """What this request's session shows its principal: the core set, or with its changes."""
        changed = self._toolsets.exposure(_session_of(ctx), principal)
        return self._exposure(principal) if changed is None else changed

    def _exposure(self, principal: Principal) -> Exposure:
        """What this principal is shown, remembered until the registry or the day changes.

        The day is the registry's (deprecations): a tool leaves the list at midnight
        without any registration.
        """
        key = (principal.tenant_id, principal.permissions)
        generation = (self._generation, self._app.registry.today)
        cached = self._exposures.get(key)
        if cached is not None and cached[0] == generation:
            return cached[1]
        exposure = self._app.registry.exposure(principal)
        if len(self._exposures) >= _MAX_EXPOSURES:
            self._exposures.clear()
        self._exposures[key] = (generation, exposure)
        return exposure

    async def _offer_confirmation(
        self,
        ctx: ServerRequestContext[Any],
        envelope: Envelope,
    ) -> types.InputRequiredResult | None:
        """Offer the plan's confirmation page by URL-mode elicitation, where it can be.

        Only with a `confirm_url`, to a client that declared URL-mode elicitation. A
        handshake-era connection is sent the request and the plan is answered when
        the client replies; a 2026-era one is answered with the request to retry
        after it (InputRequiredResult), and its retry gets the same plan. The answer
        (accept, decline, cancel, or none in time) changes nothing: confirming happens
        on the page, as the person who holds the principal.
        """
        plan_id = _plan_id(envelope)
        if self._confirm_url is None or plan_id is None or not _takes_url_elicitation(ctx):
            return None
        url = self._confirm_url(plan_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return types.InputRequiredResult(
                input_requests={
                    _CONFIRM_INPUT: types.ElicitRequest(
                        params=types.ElicitRequestURLParams(message=_CONFIRM_MESSAGE, url=url),
                    ),
                },
                request_state=plan_id,
            )
        if not ctx.session.can_send_request:
            return None
        with anyio.move_on_after(self._elicitation_timeout):
            try:
                await ctx.session.elicit_url(
                    _CONFIRM_MESSAGE,
                    url,
                    plan_id,
                    related_request_id=ctx.request_id,
                )
            except Exception:  # noqa: BLE001 - advisory: the plan stands, whatever the client says
                return None
        return None

    async def _resumed(self, call: ToolCall, principal: Principal, plan_id: str) -> Envelope:
        """What a retry after the offer reads: the plan as proposed, or that it closed."""
        try:
            record = await self._app.writes.get_plan(plan_id, principal)
            tool = self._app.registry.get(record.plan.tool)
        except HandrailError:
            return _plan_gone(call)
        if record.state not in _OPEN_PLANS:
            return _plan_gone(call, record.plan.tool, record.state)
        return proposal_envelope(call.id, tool, record.plan)

    def _principal_claim(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """Who a sealed request state belongs to: the tenant and user of the request."""
        del ctx
        principal = self._caller()
        return None if principal is None else json.dumps([principal.tenant_id, principal.user_id])

    # --- list_changed ----------------------------------------------------------------------------

    async def _subscriptions_listen(
        self,
        ctx: ServerRequestContext[Any],
        params: types.SubscriptionsListenRequestParams,
    ) -> types.SubscriptionsListenResult:
        """A 2026-era client's stream of change events, served by the SDK's handler.

        The SDK bounds streams for the whole server; each principal holds at most
        LISTENS_PER_PRINCIPAL of them, so one cannot take every place.
        """
        self._loops.add(asyncio.get_running_loop())
        principal = self._caller()
        if principal is not None and not self._listens.enter(principal):
            raise MCPError(code=types.INTERNAL_ERROR, message="Subscription limit reached")
        try:
            return await self._listen(ctx, params)
        finally:
            if principal is not None:
                self._listens.leave(principal)

    async def _initialized(
        self,
        ctx: ServerRequestContext[Any],
        params: types.NotificationParams,
    ) -> None:
        """Remember a handshake-era connection, to tell it when the tool list changes."""
        del params
        loop = asyncio.get_running_loop()
        self._loops.add(loop)
        connection = _connection_of(ctx)
        if connection is not None:
            self._connections[connection] = loop

    def _registry_changed(self, name: str) -> None:
        """A tool was registered or deregistered (any thread): forget exposures, tell clients."""
        del name
        self._generation = next(self._generations)  # atomic, whichever thread changes it
        self._exposures.clear()
        for loop in list(self._loops):
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._announce, loop)

    def _announce(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`: send list_changed to its connections and to `subscriptions/listen`."""
        connections = [c for c, served in list(self._connections.items()) if served is loop]
        task = loop.create_task(self._send_list_changed(connections))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_list_changed(self, connections: list[Connection]) -> None:
        """One event on the listen bus, and one notification per connection, side by side.

        Each is best effort (the SDK's notify never raises); a client that stopped
        reading holds up only its own notification.
        """
        async with anyio.create_task_group() as group:
            group.start_soon(self._bus.publish, ToolsListChanged())
            for connection in connections:
                group.start_soon(connection.send_tool_list_changed)


_MAX_EXPOSURES: Final = 1024


def _no_header_parameters(name: str) -> None:
    """No tool's schema for `Mcp-Param-*` header checks: the gate reads only the body.

    The SDK would otherwise run the tools/list handler on every HTTP tools/call to find
    the schema, outside any caller's scope. Arguments reach a tool only from the
    request body, through the gate's checks; headers that claim to mirror them are
    never read, so there is nothing for them to contradict.
    """
    del name


def _call_ids() -> Callable[[], str]:
    """Unique parts of call ids: a random prefix per server, then a counter.

    As unique as a uuid per call (the prefix is 64 random bits) at a fraction of the
    cost on the hot path.
    """
    prefix = uuid.uuid4().hex[:16]
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):x}"


def _unidentified(call: ToolCall) -> Envelope:
    """The refusal of a call whose caller is unknown: nothing looked up, nothing run."""
    return refusal(call, ErrorCode.PERMISSION_DENIED, _NO_PRINCIPAL)


def _plan_gone(call: ToolCall, tool: str | None = None, state: PlanState | None = None) -> Envelope:
    """The answer to a retry whose plan is no longer waiting: nothing runs here."""
    where = "could not be found" if state is None else f"is {state.value.lower()}"
    summary = (
        f"The plan {where} and no longer awaits confirmation; nothing was run by this call. "
        f"Ask the user what they decided in the application."
    )
    return refusal(call, ErrorCode.PLAN_CLOSED, summary, tool=tool)


def _unsealed_state(call: ToolCall) -> Envelope:
    """The answer to request state this server never sent (it offers no confirmation page)."""
    summary = (
        "This server sent no request state to return; nothing was run. Make the call again "
        "without it."
    )
    return refusal(call, ErrorCode.INVALID_ARGUMENTS, summary)


def _plan_id(envelope: Envelope) -> str | None:
    data = envelope.data
    if isinstance(data, Mapping):
        found = data.get("plan_id")
        if isinstance(found, str):
            return found
    return None


def _takes_url_elicitation(ctx: ServerRequestContext[Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    elicitation = None if capabilities is None else capabilities.elicitation
    return elicitation is not None and elicitation.url is not None


def _progress_to(ctx: ServerRequestContext[Any]) -> ProgressReporter:
    """A ProgressReporter sending this request's progress notifications."""

    async def report(progress: float, total: float | None, message: str | None) -> None:
        text = None if message is None else message[:_MAX_PROGRESS_MESSAGE]
        await ctx.session.report_progress(progress, total, text)

    return report


def _session_of(ctx: ServerRequestContext[Any]) -> Connection | None:
    """The session a request belongs to: its handshake-era connection; None for 2026-era."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return None
    return _connection_of(ctx)


def _connection_of(ctx: ServerRequestContext[Any]) -> Connection | None:
    """The connection a request came on.

    The SDK gives handlers a per-request session, which holds its connection but
    does not show it; it is the only handle on a client's standalone channel.
    """
    found = getattr(ctx.session, "_connection", None)
    return found if isinstance(found, Connection) else None
