"""Neutral conversation turns: the pivot through which wire formats convert.

A transcript is the tool-relevant part of a conversation: user text, assistant turns
(text and the calls they proposed, ids verbatim) and tool results (the text the model
read, a data block around the envelope, and whether it was an error). Every adapter
converts to and from it, keeping result text verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from handrail.calls import ToolCall
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError
from handrail.shaping.marking import DataMarker

__all__ = [
    "AssistantTurn",
    "CallIdLedger",
    "ToolResult",
    "ToolResultsTurn",
    "Turn",
    "UserTurn",
    "pair_results",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class UserTurn:
    """What the user said."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AssistantTurn:
    """What the model said: text, tool calls, or both, in one turn."""

    text: str | None = None
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """The result of one call as the model read it."""

    call_id: str
    tool: str
    """The Handrail name of the tool the call named."""
    content: str
    """The text the model reads: the envelope in a data block (`shaping.marking`).

    Transcripts written before marking hold the envelope's plain JSON; both read back.
    """
    is_error: bool = False

    @classmethod
    def of(cls, envelope: Envelope, marker: DataMarker) -> ToolResult:
        """The result an envelope becomes on the wire: marked with its source and trust."""
        return cls(
            call_id=envelope.call_id,
            tool=envelope.tool,
            content=marker.mark(envelope),
            is_error=not envelope.ok,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResultsTurn:
    """The results of one assistant turn's calls, in call order."""

    results: tuple[ToolResult, ...]


Turn = UserTurn | AssistantTurn | ToolResultsTurn


def pair_results(
    calls: Sequence[ToolCall],
    envelopes: Sequence[Envelope],
    *,
    marker: DataMarker,
) -> ToolResultsTurn:
    """One result per call, in call order, each matched by call id (never by position).

    Each result is its envelope in a data block drawn by `marker`.

    Raises ConfigurationError for an envelope whose id names no call of the turn, or a
    call left without an envelope: both are the host's mistakes, and a provider would
    reject the turn. Calls that share an id (a model's mistake, which the gate refuses
    for all but the first) are answered in order by the envelopes with that id.
    """
    by_id: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        by_id.setdefault(envelope.call_id, []).append(envelope)
    unknown = set(by_id) - {call.id for call in calls}
    if unknown:
        raise ConfigurationError(f"results for ids no call of this turn has: {sorted(unknown)}")
    results = []
    for call in calls:
        pending = by_id.get(call.id)
        if not pending:
            raise ConfigurationError(f"call {call.id!r} has no result")
        results.append(ToolResult.of(pending.pop(0), marker))
    leftover = [e.call_id for queue in by_id.values() for e in queue]
    if leftover:
        raise ConfigurationError(f"more results than calls for ids {sorted(set(leftover))}")
    return ToolResultsTurn(results=tuple(results))


class CallIdLedger:
    """The call ids seen in one conversation, to refuse an id a model reuses.

    A provider matches results to calls by id, so an id reused in a later turn would
    make the earlier result ambiguous. `admit` marks such calls as defective, which
    the gate refuses at stage 1; ids repeated inside one turn are the batch's concern.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def admit(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The turn's calls, those reusing an earlier turn's id marked defective."""
        admitted = [
            replace(
                call, defect=f"the call id {call.id[:64]!r} was already used in this conversation"
            )
            if call.id in self._seen and call.defect is None
            else call
            for call in calls
        ]
        self._seen.update(call.id for call in calls)
        return admitted
