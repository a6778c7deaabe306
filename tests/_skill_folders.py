"""Skill folders written into a temporary library, and a gate over the skill tools."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from handrail import Gate, Principal, Registry, RiskLevel, ToolCall, tool
from handrail.envelope import Envelope
from handrail.skills import SkillLibrary, skill_tools

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "skills"
BOOKSTORE_TOOLS = (
    "bookstore.search_books",
    "bookstore.check_inventory",
    "bookstore.order_status",
)
READER = Principal(user_id="u1", tenant_id="t1", permissions=frozenset({"skills.use"}))


def skill_md(front: str, body: str = "Do the thing.\n") -> str:
    """A SKILL.md with the given front matter lines and body."""
    return f"---\n{front.strip()}\n---\n{body}"


def write_skill(
    library: Path,
    name: str,
    *,
    front: str | None = None,
    body: str = "Do the thing.\n",
    files: dict[str, str] | None = None,
) -> Path:
    """A skill folder `name` under `library`; `front` defaults to a valid minimal one."""
    folder = library / name
    folder.mkdir(parents=True, exist_ok=True)
    if front is None:
        front = f"name: {name}\ndescription: A skill called {name}."
    (folder / "SKILL.md").write_text(skill_md(front, body), encoding="utf-8")
    for path, text in (files or {}).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return folder


def copy_examples(target: Path) -> Path:
    """The example skills copied into `target` (a fresh library)."""
    shutil.copytree(EXAMPLES, target)
    return target


def stand_in_registry() -> Registry:
    """A registry with stand-ins of the bookstore tools the example skills list."""
    registry = Registry()
    for name in BOOKSTORE_TOOLS:
        namespace, short = name.split(".")

        async def stand_in() -> dict[str, object]:
            return {}

        stand_in.__name__ = short
        stand_in.__doc__ = f"Stand-in for {name}."
        registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, namespace=namespace)(stand_in))
    return registry


def skill_gate(library: SkillLibrary, **options: Any) -> Gate:
    """A gate over the skill tools of `library` (they need the `skills.use` permission)."""
    registry = Registry()
    options.setdefault("permissions", ("skills.use",))
    for made in skill_tools(library, **options):
        registry.register(made)
    return Gate(registry)


async def call(
    gate: Gate,
    name: str,
    arguments: dict[str, Any],
    principal: Principal = READER,
) -> Envelope:
    """One call of `name` through `gate`."""
    return await gate.handle(
        ToolCall(id="c1", name=name, arguments=json.dumps(arguments)), principal
    )
