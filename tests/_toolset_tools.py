"""Stand-ins for the catalogue tools and the skill library, for the toolset tests.

`search_tools` and `load_skill` are registered under their fixed names and answer in
the shapes of the catalogue contract: `search_tools` returns whatever names `Catalogue`
maps its query to (a test makes it lie, as an injected or compromised search would),
and `load_skill` claims whatever allowed tools `Catalogue.claims` says, never what
the library holds. The deferred tools: `billing_lookup` (anyone), `audit_log` (needs
`audit.read`), `t2_export` (tenant t2 only), `wipe_all` (L4), `shown_tool` (not
deferred). `SkillLibrary` and `SkillSelector` are fakes of the skills package's API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import mcp_types as types
from pydantic import Field

from handrail import Registry, RiskLevel, Tool, tool
from handrail.errors import NotFound

SKILL_TEXT = "Look the account up with billing_lookup before answering."


@dataclass
class Catalogue:
    """What the stand-in tools answer: names per query, and claims per skill."""

    found: dict[str, list[str]] = field(default_factory=dict)
    claims: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeSkill:
    name: str
    description: str
    allowed_tools: frozenset[str]
    instructions: str = SKILL_TEXT


class SkillLibrary:
    """The host's skills, by name."""

    def __init__(self, *skills: FakeSkill) -> None:
        self._skills = {skill.name: skill for skill in skills}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._skills)

    def get(self, name: str) -> FakeSkill:
        return self._skills[name]

    def instructions(self, name: str) -> str:
        return self._skills[name].instructions


class SkillSelector:
    """A selector that answers a fixed list, cut to k."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.asked: list[tuple[str, int]] = []

    def select(self, goal: str, *, k: int) -> tuple[str, ...]:
        self.asked.append((goal, k))
        return self.names


BILLING = FakeSkill(
    name="billing",
    description="Invoices and accounts.",
    allowed_tools=frozenset({"billing_lookup"}),
)
AUDIT = FakeSkill(
    name="audit",
    description="Audit trails.",
    allowed_tools=frozenset({"audit_log", "t2_export", "wipe_all"}),
)


def library() -> SkillLibrary:
    return SkillLibrary(BILLING, AUDIT)


def _definition(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The tool {name}.",
        "parameters": {"type": "object", "properties": {}},
    }


def catalogue_tools(catalogue: Catalogue) -> list[Tool]:
    """`search_tools` and `load_skill`, answering from `catalogue`."""

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="search_tools")
    def search_tools(
        query: Annotated[str, Field(min_length=1, max_length=200)],
        limit: Annotated[int, Field(ge=1, le=20)] = 5,
    ) -> dict[str, Any]:
        """Find tools for a task by what they do; found tools become callable."""
        names = catalogue.found.get(query, [])[:limit]
        return {
            "query": query,
            "tools": [_definition(name) for name in names],
            "matches": len(names),
            "omitted": 0,
        }

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="load_skill")
    def load_skill(name: Annotated[str, Field(max_length=64)]) -> dict[str, Any]:
        """Load a skill's instructions by name."""
        if name not in catalogue.claims:
            raise NotFound(f"There is no skill {name!r}.")
        return {
            "skill": name,
            "description": "A skill.",
            "allowed_tools": catalogue.claims[name],
            "instructions": SKILL_TEXT,
            "truncated": False,
            "references": [],
            "scripts": [],
        }

    return [search_tools, load_skill]


def deferred_tools() -> list[Tool]:
    """The deferred tools (and one shown tool) a search may find."""

    @tool(risk=RiskLevel.L1_INTERNAL_READ, defer_loading=True)
    def billing_lookup(account: Annotated[str, Field(max_length=20)]) -> dict[str, str]:
        """An account's open invoices."""
        return {"account": account, "open": "INV-7"}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, defer_loading=True, permissions={"audit.read"})
    def audit_log(day: Annotated[str, Field(max_length=10)]) -> list[str]:
        """The audit log of one day."""
        return [day]

    @tool(risk=RiskLevel.L1_INTERNAL_READ, defer_loading=True, enabled_tenants={"t2"})
    def t2_export() -> str:
        """Tenant t2's export."""
        return "t2 data"

    @tool(risk=RiskLevel.L4_FORBIDDEN, defer_loading=True)
    def wipe_all() -> str:
        """Deletes everything."""
        return "wiped"

    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    def shown_tool() -> str:
        """Always shown."""
        return "shown"

    return [billing_lookup, audit_log, t2_export, wipe_all, shown_tool]


def register_catalogue(registry: Registry, catalogue: Catalogue) -> None:
    """Add the catalogue tools and the deferred tools to `registry`."""
    for made in (*catalogue_tools(catalogue), *deferred_tools()):
        registry.register(made)


def error_code(result: types.CallToolResult) -> Any:
    """The error type of an MCP tool result's envelope (None when it succeeded)."""
    assert isinstance(result.structured_content, dict)
    return result.structured_content.get("error_type")


def names_of(tools: object) -> set[str]:
    """The names of a request's specs."""
    assert isinstance(tools, Sequence)
    return {spec.name for spec in tools}


class Heard:
    """The list_changed notifications one MCP client received (its message handler)."""

    def __init__(self) -> None:
        self.count = 0
        self.arrived = anyio.Event()

    async def __call__(self, message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self.arrived.set()

    async def next(self, wait: float) -> None:
        """Wait (at most `wait` seconds) for the next notification."""
        with anyio.fail_after(wait):
            await self.arrived.wait()
        self.arrived = anyio.Event()
