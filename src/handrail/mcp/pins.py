"""Pinning the definitions of imported MCP tools: approval, drift, and what people see.

Owns the check of a listed definition against its pin (`PINNED`, `NEW` or `CHANGED`),
an operator's approval (a new pin, or a re-approval by compare-and-set on the pin's
version), the audit events of both (an approval, a drift that disables a tool), and the
difference people read before approving. A tool whose definition no longer hashes as
pinned is not served until it is approved again: no silent change of what a model is
told a tool does. It never decides a tool's risk (the policy does) and never calls one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from handrail.clock import Clock, SystemClock
from handrail.errors import AccessRefusedError, ErrorCode
from handrail.events import AuditSubject
from handrail.mcp.upstream import UpstreamTool
from handrail.pins import PinRecord
from handrail.record.audit import Auditor, AuditSink
from handrail.store.base import Store

__all__ = ["PinBook", "PinCheck", "PinStatus", "definition_diff"]

AUDIT_KIND = "mcp_pin"


class PinStatus(StrEnum):
    """How a listed definition compares with its pin."""

    PINNED = "pinned"
    """The same definition an operator approved: served."""
    NEW = "new"
    """Never approved: not served until it is (unless the policy approves new tools)."""
    CHANGED = "changed"
    """Differs from what was approved: disabled until approved again."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PinCheck:
    """One tool's definition as listed now, with its pin (if any) and their status."""

    upstream: str
    tool: UpstreamTool
    status: PinStatus
    pin: PinRecord | None

    @property
    def served(self) -> bool:
        """Whether the tool may be imported as it is listed now."""
        return self.status is PinStatus.PINNED


class PinBook:
    """The pins of upstream tools in a store, with their audit trail.

    Store calls block; async callers run them in a worker thread. A drift is audited
    once per listed definition in this process, not on every check: only the last
    one reported per tool is remembered, so an upstream that lists a new definition
    every time cannot grow this process's memory.
    """

    def __init__(
        self,
        store: Store,
        *,
        audit: AuditSink | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        self._auditor = Auditor(audit, self._clock, new_id=new_id)
        self._reported: dict[tuple[str, str], str] = {}

    def check(self, upstream: str, tool: UpstreamTool) -> PinCheck:
        """Compare a listed definition with its pin; a change is audited as a drift."""
        pin = self._store.get_pin(upstream, tool.name)
        if pin is None:
            status = PinStatus.NEW
        elif pin.definition_hash == tool.definition_hash():
            status = PinStatus.PINNED
        else:
            status = PinStatus.CHANGED
            self._drifted(upstream, tool, pin)
        return PinCheck(upstream=upstream, tool=tool, status=status, pin=pin)

    def approve(self, upstream: str, tool: UpstreamTool, *, actor: str) -> PinRecord:
        """Pin the definition as listed now, approved by `actor`; audited.

        Re-approving the pinned definition changes nothing, and so does losing a race
        to an approval of the same definition (two proxies that approve new tools,
        starting at once). Losing one to another definition is refused (CONFLICT):
        look at the tool again.
        """
        definition_hash = tool.definition_hash()
        current = self._store.get_pin(upstream, tool.name)
        if current is not None and current.definition_hash == definition_hash:
            return current
        record = PinRecord(
            upstream=upstream,
            tool=tool.name,
            definition_hash=definition_hash,
            definition=tool.canonical(),
            approved_by=actor,
            approved_at=self._clock.now(),
            version=1 if current is None else current.version + 1,
        )
        if current is None:
            stored = self._store.insert_pin(record)
        else:
            stored = self._store.replace_pin(record, expect_version=current.version)
        if not stored:
            # Someone else approved meanwhile: the same definition is this approval done.
            now = self._store.get_pin(upstream, tool.name)
            if now is not None and now.definition_hash == definition_hash:
                return now
            raise AccessRefusedError(
                ErrorCode.CONFLICT,
                f"the pin of {upstream}/{tool.name} changed meanwhile; look at it again",
            )
        previous = "new" if current is None else f"replaces {current.definition_hash[:16]}"
        self._emit(
            upstream,
            tool.name,
            stage="approve",
            decision="approved",
            actor=actor,
            detail=f"sha256={definition_hash} version={record.version} ({previous})",
        )
        return record

    def pins(self, upstream: str | None = None) -> list[PinRecord]:
        """The stored pins (of one upstream, or all), by upstream and tool."""
        return self._store.list_pins(upstream=upstream)

    def _drifted(self, upstream: str, tool: UpstreamTool, pin: PinRecord) -> None:
        listed = tool.definition_hash()
        key = (upstream, tool.name)
        if self._reported.get(key) == listed:
            return
        self._reported[key] = listed
        self._emit(
            upstream,
            tool.name,
            stage="drift",
            decision="disabled",
            actor="system",
            code=ErrorCode.UNKNOWN_TOOL,
            detail=f"pinned sha256={pin.definition_hash} listed sha256={listed}",
        )

    def _emit(
        self,
        upstream: str,
        tool: str,
        *,
        stage: str,
        decision: str,
        actor: str,
        detail: str,
        code: ErrorCode | None = None,
    ) -> None:
        if not self._auditor.enabled:
            return
        subject = AuditSubject(tool=f"{upstream}/{tool}"[:128], user_id=actor)
        event = self._auditor.event(
            kind=AUDIT_KIND,
            stage=stage,
            decision=decision,
            subject=subject,
            code=None if code is None else code.value,
            detail=detail,
        )
        self._auditor.emit([event])


def definition_diff(pin: PinRecord | None, tool: UpstreamTool) -> str:
    """A unified diff from the pinned definition to the listed one, for people.

    Both sides are pretty-printed JSON with sorted keys; a new tool diffs against
    nothing. Upstream text is shown as data (JSON-escaped), never interpreted.
    """
    before = [] if pin is None else _pretty(json.loads(pin.definition))
    after = _pretty(tool.definition())
    return "".join(
        difflib.unified_diff(
            before,
            after,
            fromfile="pinned" if pin is not None else "(not pinned)",
            tofile="upstream now",
        ),
    )


def _pretty(value: object) -> list[str]:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True)
    return [line + "\n" for line in text.splitlines()]
