"""Registry: the one source of what the model may see and of what may run.

Owns registration (with collision detection), deregistration, both audited (with
every business-value declaration a registered tool makes), and
exposure: which tools exist for a given principal, tenant and request. The rules of
exposure live in `exposure`; the registry is the one place they are applied to what is
registered, and the only source of what adapters send. It never holds a spec without
its implementation, and never runs a tool.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from datetime import date
from types import MappingProxyType

from handrail.clock import Clock, SystemClock
from handrail.declare.definition import Tool
from handrail.declare.exposure import (
    Exposure,
    ExposureRequest,
    barred,
    never_exposed,
    retired,
    select_tools,
)
from handrail.declare.governance import example_errors, utc_day
from handrail.errors import DuplicateToolError, RegistrationError, UnknownToolError
from handrail.events import AuditSubject
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.spec import ToolSpec

__all__ = ["Registry", "RegistryListener"]

RegistryListener = Callable[[str], None]
"""Called with a tool's name after it was registered or deregistered."""

_log = logging.getLogger(__name__)

_FOLD = re.compile(r"[^a-z0-9]")


def _folded(name: str) -> str:
    # Provider name rules differ (some forbid '.', some are case-insensitive); two
    # names that fold to the same key could be confused on some wire, so they collide.
    return _FOLD.sub("_", name.lower())


def _open_to_all(spec: ToolSpec) -> bool:
    """Whether `barred(spec, tenant)` is None for every tenant.

    Nothing about the spec itself bars it (`never_exposed`), it is not limited to some
    tenants (`ToolSpec.enabled_for`) and it has no deprecation day (which the clock
    decides at each lookup).
    """
    return never_exposed(spec) is None and spec.enabled_tenants is None and not spec.deprecation


class Registry:
    """Tools by full name. Reads are lock-free; writes copy the table under a lock."""

    def __init__(
        self,
        *,
        audit: AuditSink | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._auditor = Auditor(audit, self._clock, new_id=new_id)
        self._lock = threading.Lock()
        self._tools: MappingProxyType[str, Tool] = MappingProxyType({})
        # The tools no tenant is barred from (`_open_to_all`), so that `lookup` of one
        # needs no call. Swapped after `_tools`; `lookup` trusts an entry only when it
        # is the very Tool `_tools` holds, so a reader between the two swaps is safe.
        self._open: MappingProxyType[str, Tool] = MappingProxyType({})
        # Copied on write like the table, so notifying never holds the lock.
        self._listeners: tuple[RegistryListener, ...] = ()

    def subscribe(self, listener: RegistryListener) -> Callable[[], None]:
        """Call `listener(name)` after every register and deregister; returns unsubscribe.

        Listeners run in the thread that changed the registry, after the change is
        visible and audited. One that raises is logged and does not undo the change or
        keep the others from running. Unsubscribing twice does nothing.
        """
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                kept = list(self._listeners)
                if listener in kept:
                    kept.remove(listener)
                    self._listeners = tuple(kept)

        return unsubscribe

    def register(self, tool: Tool, *, actor: str = "system") -> ToolSpec:
        """Add a tool. Refuses a name that equals or folds to a registered one.

        Also refuses a tool whose declared examples its own schema rejects: they are
        shown to people and to lint as what a good call looks like.
        """
        if not isinstance(tool, Tool):
            msg = f"register() takes a Tool built by @tool or Tool.from_json_schema, not {tool!r}"
            raise TypeError(msg)
        name = tool.spec.name
        wrong = example_errors(tool)
        if wrong:
            self._audit("register", "refused", tool.spec, actor, wrong)
            raise RegistrationError(f"tool {name!r}: {wrong}")
        with self._lock:
            folded = _folded(name)
            clash = next((n for n in self._tools if _folded(n) == folded), None)
            if clash is not None:
                self._audit("register", "refused", tool.spec, actor, f"collides with {clash!r}")
                raise DuplicateToolError(
                    f"tool {name!r} collides with registered tool {clash!r}",
                )
            table = dict(self._tools)
            table[name] = tool
            self._tools = MappingProxyType(table)
            if _open_to_all(tool.spec):
                self._open = MappingProxyType({**self._open, name: tool})
        # Each declared business value is its own event: people review these exceptions
        # to the identity check, with the reason given for each.
        declared = [
            ("business_value", "declared", f"{key}: {value.reason}")
            for key, value in sorted(tool.spec.business_values.items())
        ]
        self._audit("register", "accepted", tool.spec, actor, None, *declared)
        self._notify(name)
        return tool.spec

    def deregister(self, name: str, *, actor: str = "system") -> Tool:
        """Remove a tool; calls already running finish, new calls see UNKNOWN_TOOL."""
        with self._lock:
            if name not in self._tools:
                raise UnknownToolError(f"no tool named {name!r} is registered")
            table = dict(self._tools)
            removed = table.pop(name)
            self._tools = MappingProxyType(table)
            if name in self._open:
                self._open = MappingProxyType({n: t for n, t in self._open.items() if n != name})
        self._audit("deregister", "removed", removed.spec, actor, None)
        self._notify(name)
        return removed

    def get(self, name: str) -> Tool:
        """The tool registered under `name`, whatever its exposure."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(f"no tool named {name!r} is registered") from None

    def lookup(self, name: str, principal: Principal) -> Tool | None:
        """The tool a call by this principal may reach: registered, enabled, not forbidden.

        Nor deprecated from today on (the registry's clock, UTC): a model that remembers
        a retired tool gets what a name that exists nowhere gets. Permissions are not
        checked here: a missing permission is a PERMISSION_DENIED at the gate's
        permission stage (after the schema, before any business rule reads data), not a
        tool that does not exist.
        """
        found = self._tools.get(name)
        if found is None:
            return None
        if self._open.get(name) is found:
            return found
        spec = found.spec
        if barred(spec, principal.tenant_id) is not None:
            return None
        if spec.deprecation is not None and retired(spec, utc_day(self._clock)):
            return None
        return found

    def retired_tool(self, name: str, principal: Principal) -> Tool | None:
        """The tool `lookup` refuses only for being past its deprecation day, else None.

        Never to run it: only to answer with an outcome it recorded before its day
        (a retry of a plan it executed then). Barred, disabled or unknown tools: None.
        """
        found = self._tools.get(name)
        if found is None or found.spec.deprecation is None:
            return None
        spec = found.spec
        if barred(spec, principal.tenant_id) is not None:
            return None
        return found if retired(spec, utc_day(self._clock)) else None

    @property
    def today(self) -> date:
        """The UTC day by the registry's clock: the day deprecations are judged by."""
        return utc_day(self._clock)

    def exposure(
        self,
        principal: Principal,
        request: ExposureRequest | None = None,
    ) -> Exposure:
        """The minimal toolset of one request, with every other tool and why it is out.

        `request` carries the scenario, risk ceiling, preferred tools and the model's
        capabilities (see `exposure` for the rules and the order of the cut); without
        one, every tool the principal may see is shown. Deprecations are judged by the
        registry's clock (`today`). Never includes forbidden (L4) or disabled tools, or
        tools of other tenants: `Exposure` refuses to hold them.
        """
        return select_tools(
            self.specs(),
            principal,
            request or ExposureRequest(),
            today=utc_day(self._clock),
        )

    def exposed(self, principal: Principal, *, scenario: str | None = None) -> tuple[ToolSpec, ...]:
        """The specs to send to the model for this principal (and scenario), by name.

        Never includes forbidden (L4) or disabled tools, tools of other tenants, or
        tools whose permissions the principal lacks. No capability limit applies; use
        `exposure` for one request's minimal toolset and its report.
        """
        return self.exposure(principal, ExposureRequest(scenario=scenario)).included

    def in_namespace(self, namespace: str) -> tuple[ToolSpec, ...]:
        """Specs whose name starts with `namespace.`, by name."""
        prefix = namespace.rstrip(".") + "."
        return tuple(spec for spec in self.specs() if spec.name.startswith(prefix))

    def specs(self) -> tuple[ToolSpec, ...]:
        """Every registered spec, by name, from one consistent table."""
        table = self._tools  # writes swap the table; read one version of it
        return tuple(table[n].spec for n in sorted(table))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._tools))

    def _notify(self, name: str) -> None:
        """Tell every listener that `name` changed; a failing listener is only logged."""
        for listener in self._listeners:
            try:
                listener(name)
            except Exception:  # noqa: BLE001 - the change is made; a listener cannot undo it
                _log.exception("a registry listener failed after a change of %r", name)

    def _audit(
        self,
        stage: str,
        decision: str,
        spec: ToolSpec,
        actor: str,
        detail: str | None,
        *more: tuple[str, str, str],
    ) -> None:
        """One registry event, and `more` (stage, decision, detail) about the same tool."""
        if not self._auditor.enabled:
            return
        subject = AuditSubject(tool=spec.name, schema_version=spec.schema_version, user_id=actor)
        events = [
            self._auditor.event(
                kind="registry",
                stage=stage,
                decision=decision,
                subject=subject,
                detail=detail or f"description_version={spec.description_version}",
            ),
        ]
        events.extend(
            self._auditor.event(kind="registry", stage=s, decision=d, subject=subject, detail=t)
            for s, d, t in more
        )
        self._auditor.emit(events)
