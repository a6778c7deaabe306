"""The rules of a SKILL.md front matter, each broken rule a problem naming file and line.

Owns what the keys mean: the Agent Skills rules for `name` and `description`, the shape
of `allowed-tools`, `triggers`, `license`, `compatibility` and `metadata`, unknown keys,
keys that try to grant power (a skill can only narrow what a principal may do, so a
`permissions` or `risk` key is an error, not a no-op), tools that are not registered,
and the size of the body. It never reads files.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from handrail.skills._front_matter import FrontMatter
from handrail.skills._problems import SkillProblem

__all__ = ["Checked", "check_front_matter"]

NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_NAME = 64
_MAX_DESCRIPTION = 1024
_MAX_TOOLS = 128
_MAX_TOOL_NAME = 128
_MAX_TRIGGERS = 32
_MAX_TRIGGER = 64
_MAX_LICENSE = 256
_MAX_COMPATIBILITY = 500
_MAX_METADATA = 32
_MAX_METADATA_KEY = 64
_MAX_METADATA_VALUE = 512
_REQUIRED = ("name", "description")
_KNOWN = frozenset(
    {"name", "description", "allowed-tools", "triggers", "license", "compatibility", "metadata"},
)
_RAISING = frozenset(
    {
        "permissions",
        "permission",
        "risk",
        "risk-level",
        "trust",
        "trusted",
        "side-effect",
        "scopes",
        "scope",
        "roles",
        "role",
        "grants",
        "capabilities",
        "privileges",
        "privileged",
        "sudo",
        "admin",
        "elevate",
        "confirmation",
        "approval",
    },
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Checked:
    """The front matter's values once every rule holds."""

    name: str
    description: str
    allowed_tools: tuple[str, ...]
    triggers: tuple[str, ...]
    license: str | None
    compatibility: str | None
    metadata: Mapping[str, str]


def check_front_matter(
    front: FrontMatter,
    *,
    folder: str,
    where: str,
    registered: Callable[[str], bool] | None,
) -> tuple[Checked | None, list[SkillProblem]]:
    """The checked values (None when any rule is broken) and the problems found.

    `folder` is the skill folder's name (`name` must equal it), `where` the file the
    problems name, `registered` tells whether a tool name exists (None: not checked).
    """
    problems: list[SkillProblem] = []

    def problem(key: str | None, message: str, line: int | None = None) -> None:
        at = line if line is not None else (front.lines.get(key, 1) if key else 1)
        problems.append(SkillProblem(file=where, line=at, message=message))

    for key in front.values:
        folded = key.casefold().replace("_", "-")
        if folded in _RAISING:
            problem(
                key,
                f"key {key!r} tries to grant permissions or change risk; a skill can only "
                "narrow what a principal may do",
            )
        elif key not in _KNOWN:
            problem(key, f"unknown key {key!r} (known: {', '.join(sorted(_KNOWN))})")
    for key in _REQUIRED:
        if key not in front.values:
            problem(None, f"the front matter has no {key!r}")
    name = _text(front, "name", _MAX_NAME, problem)
    if name is not None:
        if NAME_PATTERN.fullmatch(name) is None:
            problem(
                "name",
                "name must be lowercase letters, digits and single hyphens, not starting or "
                "ending with a hyphen",
            )
        elif name != folder:
            problem("name", f"name {name!r} must equal the folder's name {folder!r}")
    description = _text(front, "description", _MAX_DESCRIPTION, problem)
    tools = _allowed_tools(front, registered, problem)
    triggers = _triggers(front, problem)
    license_text = _text(front, "license", _MAX_LICENSE, problem, required=False)
    compatibility = _text(front, "compatibility", _MAX_COMPATIBILITY, problem, required=False)
    metadata = _metadata(front, problem)
    if problems or name is None or description is None:
        return None, problems
    return Checked(
        name=name,
        description=description,
        allowed_tools=tools,
        triggers=triggers,
        license=license_text,
        compatibility=compatibility,
        metadata=metadata,
    ), problems


_Problem = Callable[..., None]


def _text(
    front: FrontMatter,
    key: str,
    limit: int,
    problem: _Problem,
    *,
    required: bool = True,
) -> str | None:
    value = front.values.get(key)
    if value is None:
        if key in front.values and required:
            problem(key, f"{key} must not be empty")
        return None
    if not isinstance(value, str) or not value.strip():
        problem(key, f"{key} must be non-empty text")
        return None
    if len(value) > limit:
        problem(key, f"{key} is {len(value)} characters; at most {limit} are allowed")
        return None
    if _hidden(value, allow_newlines=True):
        problem(key, f"{key} holds control or invisible characters")
        return None
    return value.strip()


def _allowed_tools(
    front: FrontMatter,
    registered: Callable[[str], bool] | None,
    problem: _Problem,
) -> tuple[str, ...]:
    key = "allowed-tools"
    value = front.values.get(key)
    if value is None:
        return ()
    lines = front.item_lines.get(key)
    if isinstance(value, str):
        names: list[object] = list(value.split())
        lines = None
    elif isinstance(value, list):
        names = value
    else:
        problem(key, "allowed-tools must be a list of tool names or one space-separated string")
        return ()
    if len(names) > _MAX_TOOLS:
        problem(key, f"allowed-tools lists {len(names)} tools; at most {_MAX_TOOLS} are allowed")
        return ()
    tools: list[str] = []
    for index, tool in enumerate(names):
        line = lines[index] if lines is not None else None
        if not isinstance(tool, str) or not tool or len(tool) > _MAX_TOOL_NAME or _hidden(tool):
            problem(key, f"allowed-tools entry {tool!r} is not a tool name", line)
        elif registered is not None and not registered(tool):
            problem(key, f"allowed-tools names {tool!r}, which is not a registered tool", line)
        elif tool not in tools:
            tools.append(tool)
    return tuple(tools)


def _triggers(front: FrontMatter, problem: _Problem) -> tuple[str, ...]:
    key = "triggers"
    value = front.values.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > _MAX_TRIGGERS:
        problem(key, f"triggers must be a list of at most {_MAX_TRIGGERS} words or phrases")
        return ()
    lines = front.item_lines.get(key, ())
    found: list[str] = []
    for index, trigger in enumerate(value):
        if (
            not isinstance(trigger, str | int | float)
            or isinstance(trigger, bool)
            or not str(trigger).strip()
            or len(str(trigger)) > _MAX_TRIGGER
            or _hidden(str(trigger))
        ):
            line = lines[index] if index < len(lines) else None
            problem(key, f"trigger {trigger!r} must be text of 1-{_MAX_TRIGGER} characters", line)
        else:
            found.append(" ".join(str(trigger).casefold().split()))
    return tuple(dict.fromkeys(found))


def _metadata(front: FrontMatter, problem: _Problem) -> Mapping[str, str]:
    key = "metadata"
    value = front.values.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > _MAX_METADATA:
        problem(key, f"metadata must be a mapping of at most {_MAX_METADATA} entries")
        return {}
    checked: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not 0 < len(name) <= _MAX_METADATA_KEY or _hidden(name):
            problem(key, f"metadata key {name!r} must be text of 1-{_MAX_METADATA_KEY} characters")
        elif not isinstance(item, str | int | float) or isinstance(item, bool):
            problem(key, f"metadata[{name!r}] must be text")
        elif len(str(item)) > _MAX_METADATA_VALUE or _hidden(str(item)):
            problem(key, f"metadata[{name!r}] is too long or holds control characters")
        else:
            checked[name] = str(item)
    return checked


def _hidden(text: str, *, allow_newlines: bool = False) -> bool:
    """Whether `text` holds control or invisible format characters (tab and newlines aside)."""
    allowed = {"\t", "\n", "\r"} if allow_newlines else set()
    return any(
        unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} and ch not in allowed for ch in text
    )
