"""Rendering growing transcripts: each turn of a conversation rendered once, not per request.

A loop sends the whole conversation with every request, so rendering it whole each time
costs in proportion to its length. `TranscriptRenderer` keeps, for each of a few
conversations, the turns rendered so far and what the adapter's checks know of them, and
renders only the turns a request adds. Its output is always what the adapter's `to_wire`
gives for the same transcript; it never decides exposure or policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import is_
from typing import Any, Protocol

from handrail.adapters.transcript import Turn
from handrail.errors import ConfigurationError

__all__ = ["TranscriptRenderer", "WireState"]


class WireState(Protocol):
    """One adapter's rendering of one transcript so far, extended turn by turn.

    `extend` checks and renders the turns that follow those rendered so far, raising
    what `to_wire` raises for the whole transcript (UntranslatableError): extending
    turn by turn refuses exactly the transcripts `to_wire` refuses, with the same error.
    A state that raised is spent. `wire` is the transcript so far in the format.
    """

    def extend(self, turns: Sequence[Turn]) -> None:
        """Check and render the next turns."""
        ...

    def wire(self) -> list[dict[str, Any]]:
        """The messages (or items, or contents) of every turn so far, in a new list."""
        ...


class TranscriptRenderer:
    """Renders requests' transcripts, each turn once for a conversation that grows.

    A transcript whose turns start with the very turn objects (by identity, not
    equality) of one rendered before is an extension of it: only the new turns are
    rendered. Anything else (a replay, a resumed run read back from a store, another
    conversation) is rendered whole. Up to `conversations` transcripts are kept,
    by their first turn, the least recently used dropped first; a refused transcript
    is dropped. Turns are values: one changed in place after it was rendered is not
    rendered again. The messages returned are shared with later calls: read them,
    never change them. Not for use by two threads at once.
    """

    __slots__ = ("_limit", "_open", "_start")

    def __init__(self, start: Callable[[], WireState], *, conversations: int = 16) -> None:
        if conversations < 1:
            msg = "a renderer keeps at least one conversation"
            raise ConfigurationError(msg)
        self._start = start
        self._limit = conversations
        self._open: dict[int, tuple[tuple[Turn, ...], WireState]] = {}

    def render(self, transcript: Sequence[Turn]) -> list[dict[str, Any]]:
        """The transcript in the adapter's format, as its `to_wire` would render it.

        Raises UntranslatableError as `to_wire` does.
        """
        turns = tuple(transcript)
        if not turns:
            state = self._start()
            state.extend(turns)
            return state.wire()
        # The kept turns hold their first turn alive, so its id names it while kept.
        key = id(turns[0])
        kept = self._open.pop(key, None)
        if kept is not None and len(kept[0]) <= len(turns) and all(map(is_, turns, kept[0])):
            done, state = kept
        else:
            done, state = (), self._start()
        state.extend(turns[len(done) :])  # a refusal leaves nothing kept
        self._open[key] = (turns, state)
        if len(self._open) > self._limit:
            del self._open[next(iter(self._open))]
        return state.wire()
