"""A skill: the front matter of one SKILL.md and the listing of its folder, checked.

Owns the `Skill` value the library indexes (front matter only; the body stays with the
library until `load_skill` asks for it) and `read_skill`, which turns one folder into a
Skill and its instructions, or into problems naming file and line. It never runs
anything and never reads outside the folder (see `_folder`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from handrail.shaping.budget import HeuristicTokens
from handrail.skills._checks import check_front_matter
from handrail.skills._folder import SKILL_MD, open_folder
from handrail.skills._front_matter import FrontMatterError, parse_skill_md
from handrail.skills._limits import SkillLimits
from handrail.skills._problems import SkillError, SkillProblem
from handrail.tools.workspace.paths import Workspace

__all__ = ["Skill", "read_skill"]

_SUMMARY_CHARS = 200
_TOKENS = HeuristicTokens()


@dataclass(frozen=True, kw_only=True, slots=True)
class Skill:
    """What the library knows of a skill before it is loaded: its front matter and files.

    `allowed_tools` is what the skill asks for; it only ever narrows what a principal
    may use (the loop intersects it with policy). `references` and `scripts` are paths
    relative to the skill folder (under `references/` and `scripts/`).
    """

    name: str
    description: str
    allowed_tools: frozenset[str]
    triggers: tuple[str, ...] = ()
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    references: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()
    body_chars: int = 0
    body_tokens: int = 0
    root: Path

    @property
    def summary(self) -> str:
        """The description on one line, bounded: what a list of skills shows."""
        line = " ".join(self.description.split())
        return line if len(line) <= _SUMMARY_CHARS else line[: _SUMMARY_CHARS - 3] + "..."


def read_skill(
    library: Workspace,
    name: str,
    *,
    registered: Callable[[str], bool] | None = None,
    limits: SkillLimits | None = None,
) -> tuple[Skill, str]:
    """The skill in folder `name` of `library` and its instructions (SKILL.md's body).

    Raises SkillError with every problem found: in the folder, its SKILL.md, its front
    matter and its body size. Problems name files relative to the library's root.
    """
    limits = limits or SkillLimits()
    folder = open_folder(library, name, limits)
    problems = list(folder.problems)
    where = f"{name}/{SKILL_MD}"
    if folder.skill_md is None:
        raise SkillError(problems)
    try:
        front = parse_skill_md(folder.skill_md)
    except FrontMatterError as exc:
        problems.append(SkillProblem(file=where, line=exc.line, message=exc.message))
        raise SkillError(problems) from None
    checked, found = check_front_matter(
        front,
        folder=name,
        where=where,
        registered=registered,
    )
    problems.extend(found)
    body = front.body.strip("\n")
    tokens = _TOKENS.count(body)
    if tokens > limits.max_body_tokens:
        problems.append(
            SkillProblem(
                file=where,
                line=front.body_line,
                message=f"the body is about {tokens} tokens; at most {limits.max_body_tokens} "
                "are allowed (move detail into references/)",
            ),
        )
    if problems or checked is None:
        raise SkillError(problems)
    skill = Skill(
        name=checked.name,
        description=checked.description,
        allowed_tools=frozenset(checked.allowed_tools),
        triggers=checked.triggers,
        license=checked.license,
        compatibility=checked.compatibility,
        metadata=MappingProxyType(dict(checked.metadata)),
        references=_under("references", folder.files),
        scripts=_under("scripts", folder.files),
        assets=_under("assets", folder.files),
        body_chars=len(body),
        body_tokens=tokens,
        root=library.root / name,
    )
    return skill, body


def _under(directory: str, files: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(path for path in files if path.startswith(f"{directory}/"))
