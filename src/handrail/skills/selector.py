"""The host-side skill selector: a goal's words against skills' triggers, names and descriptions.

Owns one deterministic ranking: a trigger found in the goal counts most, then a word of
the skill's name, then words of its description; ties go by name. At most `k` skills
come back and only those that clear `min_score`; what it offers is audited. It reads
the library's front matter only and never loads a skill (that is the caller's).
"""

from __future__ import annotations

import re

from handrail.clock import Clock
from handrail.errors import ConfigurationError
from handrail.record.audit import AuditSink
from handrail.skills._audit import SkillAudit
from handrail.skills.library import SkillLibrary
from handrail.skills.skill import Skill

__all__ = ["SkillSelector"]

_WORD = re.compile(r"[a-z0-9]+|[^\W_a-z0-9]+")
"""Runs of ASCII letters and digits, or of other letters: "填写pdf表单" is three words."""
_MAX_GOAL_CHARS = 20_000
_TRIGGER_WEIGHT = 4
_NAME_WEIGHT = 2
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "this",
        "to",
        "up",
        "use",
        "using",
        "we",
        "what",
        "when",
        "which",
        "will",
        "with",
        "you",
        "your",
    },
)


class SkillSelector:
    """Picks the skills a goal needs from a library, before the model is asked anything."""

    def __init__(
        self,
        library: SkillLibrary,
        *,
        min_score: int = 2,
        audit: AuditSink | None = None,
        clock: Clock | None = None,
    ) -> None:
        if min_score < 1:
            raise ConfigurationError("SkillSelector.min_score must be positive")
        self._library = library
        self._min_score = min_score
        self._audit = SkillAudit(audit, clock=clock)
        self._index = tuple(
            (skill, _words(skill.name.replace("-", " ")), _words(skill.description) - _STOPWORDS)
            for skill in library.skills()
        )

    def select(self, goal: str, *, k: int) -> tuple[str, ...]:
        """The names of at most `k` skills for `goal`, best first (ties by name)."""
        if k < 0:
            raise ConfigurationError("k must not be negative")
        goal = goal[:_MAX_GOAL_CHARS]
        text = " ".join(goal.casefold().split())
        words = _words(text) - _STOPWORDS
        scored = [
            (score, skill.name)
            for skill, name_words, description_words in self._index
            if (score := _score(skill, text, words, name_words, description_words))
            >= self._min_score
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        chosen = tuple(name for _, name in scored[:k])
        if chosen:
            self._audit.offered(chosen, by="selector")
        return chosen

    def scores(self, goal: str) -> dict[str, int]:
        """Every skill's score for `goal` (for operators explaining a choice)."""
        text = " ".join(goal[:_MAX_GOAL_CHARS].casefold().split())
        words = _words(text) - _STOPWORDS
        return {
            skill.name: _score(skill, text, words, name_words, description_words)
            for skill, name_words, description_words in self._index
        }


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold()))


def _score(
    skill: Skill,
    text: str,
    words: frozenset[str],
    name_words: frozenset[str],
    description_words: frozenset[str],
) -> int:
    triggers = sum(1 for trigger in skill.triggers if _mentions(text, trigger))
    return (
        _TRIGGER_WEIGHT * triggers
        + _NAME_WEIGHT * len(words & name_words)
        + len(words & description_words)
    )


def _mentions(text: str, trigger: str) -> bool:
    """Whether the goal holds the trigger.

    An ASCII trigger as whole words; another (Chinese, Japanese: no spaces between
    words) anywhere in the goal.
    """
    if trigger.isascii():
        pattern = rf"(?<![a-z0-9]){re.escape(trigger)}(?![a-z0-9])"
        return re.search(pattern, text) is not None
    return trigger in text
