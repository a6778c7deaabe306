"""A run's dynamic toolset: deferred tools a search found, skills made active.

Each step's exposure is the loop's ExposureRequest with the run's `discovered` tools
and, while a skill is active, `narrowed_to` the active skills' allowed tools plus the
four catalogue tools; a skill's tools count as discovered too (loaded with it). The
exposure's filters still apply, so neither ever shows a tool policy does not allow.
After each step the state follows the SUCCEEDED envelopes of `search_tools` and
`load_skill`, which are only candidates: a found name counts once `Registry.exposure`
for the principal under the run's request would show it as discovered, and a loaded
skill counts only if the host's skill library holds it (its allowed tools are the
library's, never the envelope's). At a run's start a host-side selector may make at
most k skills active and show them to the model as a data block in its first turn.
The changes are kept in the run's document (`ToolsetChange`), so the toolset survives
suspend and resume and a replay derives it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from handrail.declare.exposure import (
    CATALOGUE_TOOLS,
    LOAD_SKILL,
    SEARCH_TOOLS,
    Exposure,
    ExposureRequest,
)
from handrail.envelope import Envelope, Status, Trust
from handrail.errors import ConfigurationError
from handrail.loop._agent_record import ToolsetChange
from handrail.shaping.budget import HeuristicTokens, cut_to_tokens

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.declare.registry import Registry
    from handrail.principal import Principal
    from handrail.shaping.marking import DataMarker
    from handrail.spec import ToolSpec

__all__ = [
    "LOAD_SKILL",
    "META_TOOLS",
    "SEARCH_TOOLS",
    "RunToolset",
    "SkillPicker",
    "SkillSource",
    "SkillView",
    "ToolsetOptions",
    "active_skills",
    "discovered",
    "found_names",
    "skill_named",
]

META_TOOLS = CATALOGUE_TOOLS
"""The catalogue tools: fixed names, shown beside any skill's tools (if policy allows)."""

_SELECTED_SOURCE = "handrail:skills"
_MAX_K = 16


class SkillView(Protocol):
    """What the loop reads of one skill (`handrail.skills.Skill` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def allowed_tools(self) -> frozenset[str]: ...


class SkillSource(Protocol):
    """The host's skills (`handrail.skills.SkillLibrary`): the only word on a skill's tools."""

    @property
    def names(self) -> Iterable[str]: ...
    def get(self, name: str) -> SkillView: ...
    def instructions(self, name: str) -> str: ...


class SkillPicker(Protocol):
    """A host-side selector (`handrail.skills.SkillSelector`): at most k names for a goal."""

    def select(self, goal: str, *, k: int) -> tuple[str, ...]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsetOptions:
    """How an AgentLoop's toolset may change during a run.

    `skills` is the host's skill library: without it a `load_skill` result changes
    nothing (there is nothing to check its skill against). `selector` picks at most
    `k` skills from the task at a run's start (it needs `skills`); each one's
    instructions are cut to `selected_tokens` (`load_skill` serves the rest). Tool
    search needs no option: a registered `search_tools` tool's results are followed
    whenever it runs.
    """

    skills: SkillSource | None = None
    selector: SkillPicker | None = None
    k: int = 1
    selected_tokens: int = 3_000

    def __post_init__(self) -> None:
        if not 0 <= self.k <= _MAX_K:
            msg = f"ToolsetOptions.k must be 0..{_MAX_K}"
            raise ConfigurationError(msg)
        if self.selected_tokens < 1:
            msg = "ToolsetOptions.selected_tokens must be positive"
            raise ConfigurationError(msg)
        if self.selector is not None and self.skills is None:
            msg = "a skill selector needs the skill library it selects from"
            raise ConfigurationError(msg)


def discovered(changes: Sequence[ToolsetChange]) -> tuple[str, ...]:
    """The tools the run's searches found, in the order they were found."""
    found = (name for c in changes if c.kind == "discovered" for name in c.names)
    return tuple(dict.fromkeys(found))


def active_skills(changes: Sequence[ToolsetChange]) -> tuple[str, ...]:
    """The run's active skills, in the order they became active."""
    return tuple(dict.fromkeys(name for c in changes if c.kind == "skill" for name in c.names))


def found_names(envelope: Envelope) -> tuple[str, ...]:
    """The tool names a `search_tools` result offers: candidates, checked before use."""
    data = envelope.data
    tools = data.get("tools") if isinstance(data, Mapping) else None
    if not isinstance(tools, list):
        return ()
    names = (item.get("name") for item in tools if isinstance(item, Mapping))
    return tuple(dict.fromkeys(name for name in names if isinstance(name, str)))


def skill_named(envelope: Envelope, skills: SkillSource | None) -> str | None:
    """The skill a `load_skill` result names, if the host's library holds it."""
    data = envelope.data
    name = data.get("skill") if isinstance(data, Mapping) else None
    if skills is None or not isinstance(name, str) or name not in set(skills.names):
        return None
    return name


def _succeeded(call: ToolCall, envelope: Envelope, tool: str) -> bool:
    return (
        call.name == tool
        and envelope.tool == tool
        and envelope.error is None
        and envelope.status in {Status.OK, Status.TRUNCATED}
    )


class RunToolset:
    """The toolset rules of one AgentLoop: each step's exposure and how a step changes it.

    `base` is the loop's ExposureRequest (the host's scenario, ceiling, capabilities
    and narrowing), which every step keeps.
    """

    def __init__(
        self,
        registry: Registry,
        base: ExposureRequest,
        options: ToolsetOptions | None,
        marker: DataMarker,
    ) -> None:
        self._registry = registry
        self._base = base
        self._options = options or ToolsetOptions()
        self._marker = marker

    def request(self, changes: Sequence[ToolsetChange]) -> ExposureRequest:
        """The run's request after `changes`: discoveries added, active skills narrowing."""
        request = self._base
        found = request.discovered | set(discovered(changes))
        narrowed = self._narrowed(active_skills(changes))
        if narrowed is not None:
            # A skill's listed tools are loaded with it: shown if every filter allows them.
            found |= narrowed
            host = request.narrowed_to
            request = dataclasses.replace(
                request, narrowed_to=narrowed if host is None else narrowed & host
            )
        return dataclasses.replace(request, discovered=found)

    def exposure(self, principal: Principal, changes: Sequence[ToolsetChange]) -> Exposure:
        """What the next step's model is shown."""
        return self._registry.exposure(principal, self.request(changes))

    def citable(
        self, principal: Principal, changes: Sequence[ToolsetChange]
    ) -> tuple[ToolSpec, ...]:
        """The tools the run's steps may have shown: every discovery, no skill's narrowing.

        A skill loaded late narrows the last step, not the steps before it, so a final
        answer may still cite a tool an earlier step showed.
        """
        request = self.request(changes)
        widest = dataclasses.replace(request, narrowed_to=self._base.narrowed_to)
        return self._registry.exposure(principal, widest).included

    def _narrowed(self, names: Sequence[str]) -> frozenset[str] | None:
        skills = self._options.skills
        if not names or skills is None:
            return None
        held = set(skills.names)
        # A skill the library no longer holds adds nothing: fail closed, narrower.
        allowed = (tool for n in names if n in held for tool in skills.get(n).allowed_tools)
        return frozenset(allowed) | META_TOOLS

    def start(self, task: str) -> tuple[str, tuple[ToolsetChange, ...]]:
        """The first user turn's text, and the skills the host's selector made active."""
        options = self._options
        if options.selector is None or options.skills is None or options.k == 0:
            return task, ()
        held = set(options.skills.names)
        chosen = [n for n in dict.fromkeys(options.selector.select(task, k=options.k)) if n in held]
        chosen = chosen[: options.k]
        if not chosen:
            return task, ()
        block = self._marker.mark(_selected(options.skills, chosen, options.selected_tokens))
        changes = tuple(
            ToolsetChange(step=0, kind="skill", source="selector", names=(name,)) for name in chosen
        )
        return f"{task}\n\n{block}", changes

    def after_step(
        self,
        principal: Principal,
        changes: Sequence[ToolsetChange],
        *,
        step: int,
        calls: Sequence[ToolCall],
        envelopes: Sequence[Envelope],
    ) -> list[ToolsetChange]:
        """What one step's calls changed: re-checked discoveries, skills made active."""
        candidates: list[str] = []
        loaded: list[str] = []
        for call, envelope in zip(calls, envelopes, strict=True):
            if _succeeded(call, envelope, SEARCH_TOOLS):
                candidates.extend(found_names(envelope))
            elif _succeeded(call, envelope, LOAD_SKILL):
                name = skill_named(envelope, self._options.skills)
                if name is not None:
                    loaded.append(name)
        made: list[ToolsetChange] = []
        new = self._admitted(principal, candidates, set(discovered(changes)))
        if new:
            made.append(
                ToolsetChange(step=step, kind="discovered", source="search_tools", names=new)
            )
        active = set(active_skills(changes))
        made.extend(
            ToolsetChange(step=step, kind="skill", source="load_skill", names=(name,))
            for name in dict.fromkeys(loaded)
            if name not in active
        )
        return made

    def _admitted(
        self, principal: Principal, candidates: Sequence[str], known: set[str]
    ) -> tuple[str, ...]:
        """The candidates the run's request would show once discovered, and newly so.

        Checked under the host's request (never a skill's narrowing, which applies at
        each step), so a name passes only every filter policy has: tenant, scenario,
        ceiling, permissions, schema support. Only deferred tools are discoveries.
        """
        fresh = [name for name in dict.fromkeys(candidates) if name not in known]
        if not fresh:
            return ()
        request = dataclasses.replace(
            self._base, discovered=frozenset(fresh), include_deferred=False
        )
        eligible = set(self._registry.exposure(principal, request).eligible)
        admitted: list[str] = []
        for name in fresh:
            tool = self._registry.lookup(name, principal) if name in eligible else None
            if tool is not None and tool.spec.defer_loading:
                admitted.append(name)
        return tuple(admitted)


def _selected(skills: SkillSource, names: Sequence[str], budget: int) -> Envelope:
    """The selected skills as an untrusted data block's envelope (the model reads, never obeys).

    Each skill's instructions are cut to `budget` tokens, as `load_skill` cuts them.
    """
    shown: list[dict[str, Any]] = []
    tokens = HeuristicTokens()
    for name in names:
        skill = skills.get(name)
        text, truncated = cut_to_tokens(skills.instructions(name), budget, tokens)
        shown.append(
            {
                "skill": skill.name,
                "description": skill.description,
                "allowed_tools": sorted(skill.allowed_tools),
                "instructions": text,
                "truncated": truncated,
            }
        )
    return Envelope(
        call_id="skills",
        tool=LOAD_SKILL,
        status=Status.OK,
        summary=f"{len(shown)} skill(s) the application selected for this task.",
        data={"skills": shown},
        trust=Trust.UNTRUSTED,
        source=_SELECTED_SOURCE,
    )
