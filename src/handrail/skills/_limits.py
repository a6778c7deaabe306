"""The bounds of a skill library: what a folder may hold and how much of it a model reads.

Owns the numbers and their sanity checks; the walk, the checks and the tools apply them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from handrail.errors import ConfigurationError

__all__ = ["SkillLimits"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SkillLimits:
    """Size limits checked on load, and the token budgets of what the tools return.

    Tokens are estimated with `HeuristicTokens` (four ASCII characters per token, one
    per other character), which errs high.
    """

    max_skill_md_bytes: int = 64 * 1024
    """A larger SKILL.md is refused from its size, without reading it."""
    max_body_tokens: int = 8_000
    """A longer body (the instructions) is refused on load."""
    max_files: int = 200
    """Regular files in one skill folder, SKILL.md included."""
    max_depth: int = 6
    """Directory levels below the skill folder."""
    max_skills: int = 256
    """Skill folders in one library."""
    max_file_bytes: int = 1024 * 1024
    """A larger reference is refused from its size, without reading it."""
    load_budget_tokens: int = 3_000
    """The instructions `load_skill` returns are cut to this (and `truncated` set). The
    default fits the gate's default result budget (16,000 characters) with the rest."""
    read_budget_tokens: int = 3_000
    """The text `read_skill_file` returns is cut to this (and `truncated` set)."""
    index_chars: int = 4_000
    """How much of `load_skill`'s description the list of skills may take."""

    def __post_init__(self) -> None:
        for field in fields(self):
            if getattr(self, field.name) < 1:
                raise ConfigurationError(f"SkillLimits.{field.name} must be positive")
