"""The firewall in front of an upstream MCP server: its tools, imported as Handrail tools.

Owns turning what an upstream lists into raw-schema Tools in a namespace of their own
(`<namespace>.<tool>`) in a Registry, with risk, side effect, permissions and
confirmation from the operator's policy only: upstream annotations and descriptions
are untrusted and never lower a risk. A tool is served only while its listed
definition is the one pinned at approval; a changed one is deregistered (so neither
exposed nor callable: UNKNOWN_TOOL) until an operator approves it again. Every
connection to the upstream, first or after a failure, re-checks the pins before any
call goes through it, and so does every `notifications/tools/list_changed` the
upstream sends (handshake-era connections; `sync()` may also be called on a timer).
The model only ever sees the pinned definitions.

What a call of an imported tool becomes:

- a read answers the upstream's result as plain JSON; the Gate shapes, redacts and
  marks it untrusted like any tool's. A hang is TIMEOUT, a lost or unreachable
  upstream TRANSIENT, an answer over the size bound FAILED_FINAL, the upstream's own
  `isError` FAILED_FINAL with its (untrusted) text.
- a write is planned and confirmed through Writes like any write (keyed by its plan).
  An upstream takes no idempotency key, so a write whose answer is lost (timeout,
  crash, flood) is OUTCOME_UNKNOWN, and no reconcile hook can prove what happened:
  such a record waits for a person (`handrail executions`). A write whose connection
  could not even be opened is FAILED_FINAL: nothing was sent.

The Registry's tools are ordinary Tools: the Gate and the adapters use them in
process, and `GatedServer` serves them onward over MCP. This module never decides
whether a call may run (the Gate does) and never trusts what the upstream says.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.declare.registry import Registry
from handrail.errors import (
    ConfigurationError,
    ErrorCode,
    RegistrationError,
    ToolFailed,
    ToolRetryable,
    UnknownToolError,
)
from handrail.mcp.pins import PinBook, PinCheck, PinStatus
from handrail.mcp.policy import ToolRule, UpstreamPolicy
from handrail.mcp.upstream import Upstream, UpstreamError, UpstreamTool

__all__ = ["ImportReport", "McpProxy", "UpstreamTimeout", "as_draft_2020", "unusable"]

_NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_SEGMENTS = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}(?:\.[A-Za-z][A-Za-z0-9_-]{0,63})*")
_MAX_NAME = 128  # a Handrail tool name, namespace included
_ACTOR = "mcp-proxy"
MAX_DESCRIPTION = 8_000
"""A longer description is not imported: the model would read all of it with every list."""
MAX_DEFINITION = 65_536
"""Nor is a definition (description and schema) longer than this as canonical JSON."""
DEFAULT_TIMEOUT = 30.0


class UpstreamTimeout(ToolRetryable):
    """An upstream read did not answer within its deadline."""

    code = ErrorCode.TIMEOUT


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportReport:
    """What one look at the upstream's tools did.

    `served`: full names registered now. `hidden`: upstream names the policy hides.
    `pending`: tools waiting for an operator's approval (new or changed). `refused`:
    upstream names Handrail cannot register, with the reason (for operators).
    """

    served: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    pending: tuple[PinCheck, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


@dataclass(kw_only=True, slots=True)
class _Served:
    definition_hash: str
    name: str
    tool: Tool = field(repr=False)


class McpProxy:
    """Imports one upstream's tools into `registry` under `namespace`, and keeps them honest.

    Call `sync()` once to import; the upstream re-checks the pins on every new
    connection, and `sync()` may be called again whenever the upstream's list may have
    changed. `approve_new` pins a tool seen for the first time without asking (also
    set by the policy's `approve_new`); by default a new tool waits for approval.
    """

    def __init__(
        self,
        upstream: Upstream,
        policy: UpstreamPolicy,
        pins: PinBook,
        registry: Registry,
        *,
        namespace: str,
        approve_new: bool = False,
        default_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError(
                f"namespace {namespace!r}: 1-64 characters of [A-Za-z0-9_-], "
                f"starting with a letter",
            )
        self.upstream = upstream
        self.policy = policy
        self.pins = pins
        self.registry = registry
        self.namespace = namespace
        self._approve_new = approve_new or policy.approve_new
        self._timeout = default_timeout
        self._served: dict[str, _Served] = {}
        self._lock = asyncio.Lock()
        self._follow: set[asyncio.Task[None]] = set()
        self._resync_waiting = False
        self._resyncing = asyncio.Lock()
        self.resynced = asyncio.Event()
        """Set each time a list_changed notification of the upstream has been followed."""
        upstream.on_connect = self._on_connect
        upstream.on_list_changed = self._list_changed

    async def sync(self, *, timeout: float = DEFAULT_TIMEOUT) -> ImportReport:
        """List the upstream's tools now and import, keep or disable each one."""
        tools = await self.upstream.list_tools(timeout=timeout)
        return await self._apply(tools)

    @property
    def served(self) -> tuple[str, ...]:
        """The full names of the imported tools being served, by name."""
        return tuple(sorted(s.name for s in self._served.values()))

    def full_name(self, upstream_name: str) -> str:
        """The Handrail name of an upstream tool."""
        return f"{self.namespace}.{upstream_name}"

    async def aclose(self) -> None:
        """Close the upstream connection; the imported tools stay registered."""
        for task in list(self._follow):
            task.cancel()
        await asyncio.gather(*self._follow, return_exceptions=True)
        await self.upstream.aclose()

    def _list_changed(self) -> None:
        # Notifications that arrive while a look is still waiting to start are covered
        # by it: a flood of them queues one look, never one task each.
        if self._resync_waiting:
            return
        self._resync_waiting = True
        task = asyncio.get_running_loop().create_task(self._resync())
        self._follow.add(task)
        task.add_done_callback(self._follow.discard)

    async def _resync(self) -> None:
        # One look at a time. Once this one starts, a new notification needs a look
        # of its own (this one may have listed already), so at most one runs and one
        # waits. A failure is the upstream's; the next connection checks again.
        async with self._resyncing:
            self._resync_waiting = False
            with contextlib.suppress(UpstreamError):
                await self.sync()
        self.resynced.set()

    # --- import ------------------------------------------------------------------------

    async def _on_connect(self, tools: Sequence[UpstreamTool]) -> None:
        await self._apply(tools)

    async def _apply(self, tools: Sequence[UpstreamTool]) -> ImportReport:
        async with self._lock:
            return await asyncio.to_thread(self._apply_sync, tools)

    def _apply_sync(self, tools: Sequence[UpstreamTool]) -> ImportReport:
        served: list[str] = []
        hidden: list[str] = []
        pending: list[PinCheck] = []
        refused: list[tuple[str, str]] = []
        listed: set[str] = set()
        for listed_tool in tools:
            name = listed_tool.name
            if name in listed:
                refused.append((name, "listed twice by the upstream"))
                self._withdraw(name)
                continue
            listed.add(name)
            rule = self.policy.rule(name)
            if rule is None:
                hidden.append(name)
                self._withdraw(name)
                continue
            problem = unusable(self.namespace, listed_tool)
            if problem is not None:
                # Refused before it is pinned or hashed: one unusable definition never
                # stops the upstream's other tools from being checked and served.
                refused.append((name, problem))
                self._withdraw(name)
                continue
            check = self.pins.check(self.namespace, listed_tool)
            if check.status is PinStatus.NEW and self._approve_new:
                self.pins.approve(self.namespace, listed_tool, actor="policy:approve_new")
                check = self.pins.check(self.namespace, listed_tool)
            if not check.served:
                pending.append(check)
                self._withdraw(name)
                continue
            try:
                served.append(self._serve(listed_tool, rule))
            except RegistrationError as exc:
                refused.append((name, str(exc)))
                self._withdraw(name)
        for gone in set(self._served) - listed:
            self._withdraw(gone)  # no longer listed upstream
        return ImportReport(
            served=tuple(sorted(served)),
            hidden=tuple(sorted(hidden)),
            pending=tuple(pending),
            refused=tuple(refused),
        )

    def _serve(self, listed: UpstreamTool, rule: ToolRule) -> str:
        definition_hash = listed.definition_hash()
        current = self._served.get(listed.name)
        if current is not None and current.definition_hash == definition_hash:
            return current.name
        self._withdraw(listed.name)
        tool = self._tool(listed, rule, definition_hash)
        self.registry.register(tool, actor=_ACTOR)
        self._served[listed.name] = _Served(
            definition_hash=definition_hash,
            name=tool.name,
            tool=tool,
        )
        return tool.name

    def _withdraw(self, upstream_name: str) -> None:
        current = self._served.pop(upstream_name, None)
        if current is None:
            return
        try:
            if self.registry.get(current.name) is current.tool:
                self.registry.deregister(current.name, actor=_ACTOR)
        except UnknownToolError:
            pass

    def _tool(self, listed: UpstreamTool, rule: ToolRule, definition_hash: str) -> Tool:
        name = listed.name
        description = listed.description.strip() or f"Tool {name} of upstream {self.namespace}."
        return Tool.from_json_schema(
            name=self.full_name(name),
            description=description,
            input_schema=as_draft_2020(listed.input_schema),
            fn=self._caller(name, definition_hash, writes=rule.writes),
            risk=rule.risk,
            side_effect=rule.side_effect,
            permissions=rule.permissions,
            timeout=rule.timeout or self._timeout,
            confirmation=rule.confirmation if rule.writes else None,
            owner=f"mcp:{self.namespace}",
            business_values=rule.business_values,
            description_version="sha256:" + definition_hash[:16],
        )

    # --- calls ---------------------------------------------------------------------------

    def _caller(
        self,
        name: str,
        definition_hash: str,
        *,
        writes: bool,
    ) -> Callable[[dict[str, Any], ToolContext], Awaitable[object]]:
        """The tool's implementation: one upstream call, while the pin still holds."""

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> object:
            def still_pinned() -> bool:
                served = self._served.get(name)
                return served is not None and served.definition_hash == definition_hash

            if not still_pinned():
                raise _disabled()
            try:
                result = await self.upstream.call(
                    name,
                    arguments,
                    timeout=ctx.remaining(),
                    precheck=still_pinned,
                )
            except UpstreamError as exc:
                raise _failure(exc, writes=writes) from None
            if result.is_error:
                text = result.text() or "no reason given"
                raise ToolFailed(f"The upstream tool reported an error: {text}")
            return result.value()

        return call


def unusable(namespace: str, listed: UpstreamTool) -> str | None:
    """Why a listed definition can be neither pinned nor served in `namespace`, or None.

    The reason never quotes the upstream's text.
    """
    full = f"{namespace}.{listed.name}"
    if len(full) > _MAX_NAME or not _SEGMENTS.fullmatch(full):
        return (
            f"its name does not make a Handrail tool name (at most {_MAX_NAME} "
            f"characters with the namespace; dot-separated segments of ASCII letters, "
            f"digits, '_' or '-', each starting with a letter)"
        )
    if len(listed.description.strip()) > MAX_DESCRIPTION:
        return f"its description is over {MAX_DESCRIPTION} characters"
    try:
        canonical = listed.canonical()
    except ValueError as exc:  # a number JSON cannot carry exactly, a lone surrogate
        return f"its definition has no exact canonical JSON ({type(exc).__name__})"
    if len(canonical) > MAX_DEFINITION:
        return f"its definition is over {MAX_DEFINITION} characters"
    return None


_DRAFT_07 = frozenset(
    {
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft-07/schema",
    },
)
_CHANGED_SINCE_07 = frozenset({"additionalItems", "dependencies", "$recursiveRef"})
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "definitions", "$defs"})


def as_draft_2020(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Draft-07 input schema as the same Draft 2020-12 schema, where nothing changes meaning.

    Many MCP servers still declare Draft 07 (zod-to-json-schema). Its common subset
    means the same in 2020-12; a schema using a keyword whose meaning changed (`items`
    as an array, `additionalItems`, `dependencies`) is left as it is and refused at
    registration. Only `$schema` is dropped: the pin keeps what the upstream listed.
    """
    if schema.get("$schema") not in _DRAFT_07 or _uses_changed(schema):
        return schema
    return {key: value for key, value in schema.items() if key != "$schema"}


def _uses_changed(value: object) -> bool:
    """Whether a schema (any subschema) uses a keyword whose meaning changed after 07."""
    if isinstance(value, list):
        return any(_uses_changed(v) for v in value)
    if not isinstance(value, Mapping):
        return False
    if _CHANGED_SINCE_07 & value.keys() or isinstance(value.get("items"), list):
        return True
    for key, sub in value.items():
        if key in _NAMED_SUBSCHEMAS and isinstance(sub, Mapping):
            # Keys here are names (a property may be called "dependencies"), not keywords.
            if any(_uses_changed(v) for v in sub.values()):
                return True
        elif _uses_changed(sub):
            return True
    return False


def _disabled() -> ToolFailed:
    return ToolFailed(
        "This tool is disabled: its definition changed upstream and waits for an "
        "operator's approval. Nothing was sent.",
    )


def _failure(exc: UpstreamError, *, writes: bool) -> Exception:  # noqa: PLR0911 - one per reason
    """The signal a call's upstream failure becomes (writes: only what proves nothing ran)."""
    if exc.reason == "disabled":
        return _disabled()
    if not exc.sent:
        return ToolFailed("The upstream server could not be reached. Nothing was sent.")
    if writes:
        # The request may have reached the upstream: the outcome is unknown.
        return exc
    if exc.reason == "timeout":
        return UpstreamTimeout("The upstream server did not answer in time.")
    if exc.reason == "oversize":
        return ToolFailed("The upstream server's answer was larger than allowed.")
    if exc.reason == "protocol":
        return ToolFailed("The upstream server refused the call.")
    return ToolRetryable("The upstream server was lost during the call. You may retry.")
