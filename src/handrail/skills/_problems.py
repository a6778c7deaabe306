"""Problems found in a skill folder, each naming its file and line, and the error holding them.

Owns the wording of a problem as an operator reads it (`path:line: message`). It never
decides what is a problem; the front matter parser, the folder walk and the checks do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from handrail.errors import ConfigurationError

__all__ = ["SkillError", "SkillProblem"]

_SHOWN = 20
"""Problems an error's message spells out; the rest are counted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillProblem:
    """One thing wrong with a skill: the file (relative to the library root) and line."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


class SkillError(ConfigurationError):
    """A skill library or folder that Handrail refuses to load; `problems` says why."""

    def __init__(self, problems: Iterable[SkillProblem]) -> None:
        self.problems = tuple(problems)
        lines = [str(problem) for problem in self.problems[:_SHOWN]]
        if len(self.problems) > _SHOWN:
            lines.append(f"... and {len(self.problems) - _SHOWN} more problems")
        super().__init__("\n".join(lines) or "the skill library is not valid")
