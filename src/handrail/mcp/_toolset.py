"""Each MCP session's dynamic toolset: tools its searches found, skills it loaded.

A session is one handshake-era connection (stdio, or one Streamable HTTP session), and
its state is kept per principal within it, so neither another session nor another
caller on the same connection ever sees it. `tools/list` and the gate's exposure are
the core set plus what that session discovered, narrowed by the skills it loaded,
under the same rules as the agent loop (`handrail.loop._toolset`): a name from a
`search_tools` result counts only once `Registry.exposure` would show it to the
principal as discovered, a skill only if the host's library holds it. A 2026-era
request belongs to no session: it sees the core set, and its searches are not kept.
The state ends with its connection. Each change is audited (kind "toolset": the tools
discovered, or the skill made active, with the call that did it). The loop's rules
load with the first search or skill a session runs, not with the server.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from handrail.declare.exposure import LOAD_SKILL, SEARCH_TOOLS, ExposureRequest
from handrail.events import AuditSubject

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.declare.exposure import Exposure
    from handrail.declare.registry import Registry
    from handrail.envelope import Envelope
    from handrail.loop._agent_record import ToolsetChange
    from handrail.loop._toolset import RunToolset, SkillSource
    from handrail.principal import Principal
    from handrail.record.audit import Auditor
    from handrail.shaping.marking import DataMarker

__all__ = ["SessionToolsets"]

_Changes = dict[tuple[str, str], list["ToolsetChange"]]
_FOLLOWED = frozenset({SEARCH_TOOLS, LOAD_SKILL})
"""The catalogue tools whose results can change a session's toolset."""


class SessionToolsets:
    """The toolset state of every open session, forgotten with its connection.

    `skills` is the host's skill library: a `load_skill` result narrows a session's
    tools only when it names a skill the library holds (with the library's tools).
    `auditor` records every change.
    """

    def __init__(
        self,
        registry: Registry,
        marker: DataMarker,
        auditor: Auditor,
        *,
        skills: SkillSource | None = None,
    ) -> None:
        self._registry = registry
        self._marker = marker
        self._skills = skills
        self._auditor = auditor
        self._loaded: RunToolset | None = None
        self._sessions: weakref.WeakKeyDictionary[object, _Changes] = weakref.WeakKeyDictionary()

    def changes(self, session: object | None, principal: Principal) -> list[ToolsetChange]:
        """The session's changes for this principal so far (empty without a session)."""
        if session is None:
            return []
        return self._sessions.get(session, {}).get(_who(principal), [])

    def exposure(self, session: object | None, principal: Principal) -> Exposure | None:
        """What the session's principal is shown; None while nothing changed (the core set)."""
        changes = self.changes(session, principal)
        return self._rules().exposure(principal, changes) if changes else None

    def follow(
        self, session: object | None, principal: Principal, call: ToolCall, envelope: Envelope
    ) -> bool:
        """Take in one call's envelope; True when the session's toolset changed."""
        if session is None or call.name not in _FOLLOWED:
            return False
        known = self.changes(session, principal)
        made = self._rules().after_step(
            principal, known, step=len(known), calls=(call,), envelopes=(envelope,)
        )
        if not made:
            return False
        self._sessions.setdefault(session, {})[_who(principal)] = [*known, *made]
        subject = AuditSubject(
            tool_call_id=call.id,
            tool=call.name,
            user_id=principal.user_id,
            tenant_id=principal.tenant_id,
        )
        for change in made:
            self._auditor.note(
                kind="toolset",
                stage=change.kind,
                decision="added",
                subject=subject,
                facts={"names": list(change.names), "over": "mcp"},
            )
        return True

    def _rules(self) -> RunToolset:
        """The loop's toolset rules, loaded when a session first needs them."""
        if self._loaded is None:
            from handrail.loop._toolset import RunToolset, ToolsetOptions  # noqa: PLC0415

            options = ToolsetOptions(skills=self._skills)
            self._loaded = RunToolset(self._registry, ExposureRequest(), options, self._marker)
        return self._loaded


def _who(principal: Principal) -> tuple[str, str]:
    return (principal.tenant_id, principal.user_id)
