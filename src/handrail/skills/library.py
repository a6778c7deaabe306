"""A skill library: every skill folder under one root, checked once, indexed by name.

Owns finding the skill folders (the root's directories; a symbolic link among them is
refused, never followed), loading each (`read_skill`), the problems of them all at
once, and the index the tools and the selector read: front matter per name, the body
kept aside until a skill is loaded. What was checked is what is served: bodies are
read once, here. References are read later, on request, by `read_reference`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from handrail.errors import ConfigurationError, NotFound
from handrail.skills._folder import read_bounded
from handrail.skills._limits import SkillLimits
from handrail.skills._problems import SkillError, SkillProblem
from handrail.skills.skill import Skill, read_skill
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

if TYPE_CHECKING:
    from handrail.declare.registry import Registry

__all__ = ["SkillLibrary", "check_library"]


class SkillLibrary:
    """The skills of one root directory; immutable once loaded (use `SkillLibrary.load`)."""

    def __init__(
        self,
        root: Path,
        skills: Mapping[str, Skill],
        bodies: Mapping[str, str],
        limits: SkillLimits,
    ) -> None:
        self._root = root
        self._skills = MappingProxyType(dict(sorted(skills.items())))
        self._bodies = MappingProxyType(dict(bodies))
        self._limits = limits
        # Every file is opened beneath the library root, never through a link, the skill
        # folder included: a folder swapped for a link after loading is refused.
        self._files = Workspace(root, ignore=())

    @classmethod
    def load(
        cls,
        root: Path,
        *,
        registry: Registry | None = None,
        limits: SkillLimits | None = None,
    ) -> SkillLibrary:
        """Every skill folder under `root`, checked; SkillError lists every problem.

        With a `registry`, each tool a skill lists must be registered in it.
        """
        limits = limits or SkillLimits()
        resolved, skills, bodies, problems = _read_all(root, registry, limits)
        if problems:
            raise SkillError(problems)
        return cls(resolved, skills, bodies, limits)

    @property
    def root(self) -> Path:
        """The library's resolved root directory."""
        return self._root

    @property
    def limits(self) -> SkillLimits:
        """The limits the library was checked with; the tools' budgets too."""
        return self._limits

    @property
    def names(self) -> tuple[str, ...]:
        """The skills' names, sorted."""
        return tuple(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __len__(self) -> int:
        return len(self._skills)

    def get(self, name: str) -> Skill:
        """The skill called `name`; KeyError when there is none."""
        return self._skills[name]

    def skills(self) -> tuple[Skill, ...]:
        """Every skill, by name."""
        return tuple(self._skills.values())

    def instructions(self, name: str) -> str:
        """The body of the skill's SKILL.md, as checked on load; KeyError when unknown."""
        return self._bodies[name]

    def read_reference(self, name: str, path: str) -> bytes:
        """The bytes of one of the skill's references, read now, without following links.

        Raises NotFound for an unknown skill or a path that is not one of its listed
        references, InvalidArgument for a path that is not plain (`..`, absolute,
        control characters), one that became a link or grew past the size limit.
        """
        skill = self._skills.get(name)
        if skill is None:
            raise NotFound(f"There is no skill named {name!r}.")
        file = self._files.relative(path)
        if file.text not in skill.references:
            raise NotFound(f"{file.text} is not one of the references of skill {name!r}.")
        inside = WorkspaceFile((name, *file.parts))
        return read_bounded(self._files, inside, self._limits.max_file_bytes)

    def check_script(self, name: str, path: str) -> None:
        """Refuse a listed script that is no longer the plain file checked on load.

        Run just before the sandbox starts it: a script swapped since for a symbolic
        link (anywhere on its path), a file with several hard links or a non-regular
        file is refused InvalidArgument, a removed one NotFound, so its target is never
        run. (A swap between this check and the sandbox's start is the host's to
        prevent: keep the library read-only to everyone but its deployer.)
        """
        skill = self._skills.get(name)
        if skill is None or path not in skill.scripts:
            raise NotFound(f"{path!r} is not a script of skill {name!r}.")
        file = self._files.relative(path)
        read_bounded(self._files, WorkspaceFile((name, *file.parts)), self._limits.max_file_bytes)


def check_library(
    root: Path,
    *,
    registry: Registry | None = None,
    limits: SkillLimits | None = None,
) -> tuple[tuple[Skill, ...], tuple[SkillProblem, ...]]:
    """The skills under `root` that are valid, and the problems of the others."""
    _, skills, _, problems = _read_all(root, registry, limits or SkillLimits())
    return tuple(skills[name] for name in sorted(skills)), tuple(problems)


def _read_all(
    root: Path,
    registry: Registry | None,
    limits: SkillLimits,
) -> tuple[Path, dict[str, Skill], dict[str, str], list[SkillProblem]]:
    try:
        resolved = Path(root).resolve(strict=True)
    except OSError as exc:
        raise ConfigurationError(f"skill library {root} cannot be opened: {exc.strerror}") from None
    if not resolved.is_dir():
        raise ConfigurationError(f"skill library {resolved} is not a directory")
    registered = None if registry is None else registry.__contains__
    library = Workspace(resolved, ignore=())
    skills: dict[str, Skill] = {}
    bodies: dict[str, str] = {}
    problems: list[SkillProblem] = []
    for folder in _folders(resolved, limits, problems):
        try:
            skill, body = read_skill(library, folder, registered=registered, limits=limits)
        except SkillError as exc:
            problems.extend(exc.problems)
        else:
            skills[skill.name] = skill
            bodies[skill.name] = body
    return resolved, skills, bodies, problems


def _folders(root: Path, limits: SkillLimits, problems: list[SkillProblem]) -> list[str]:
    """The names of the root's skill folders; links and other entries become problems."""
    folders: list[str] = []
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            found = sorted(
                (entry.name, entry.stat(follow_symlinks=False).st_mode)
                for entry in entries
                if not entry.name.startswith(".")
            )
    finally:
        os.close(fd)
    for name, mode in found:
        if stat.S_ISLNK(mode):
            problems.append(
                SkillProblem(
                    file=name,
                    line=None,
                    message="is a symbolic link; skill folders are never followed through links",
                ),
            )
        elif stat.S_ISDIR(mode):
            if len(folders) >= limits.max_skills:
                problems.append(
                    SkillProblem(
                        file=".",
                        line=None,
                        message=f"holds more than {limits.max_skills} skill folders",
                    ),
                )
                break
            folders.append(name)
    return folders
