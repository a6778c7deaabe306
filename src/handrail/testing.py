"""Public test doubles: a scripted model, a fixed clock, memory store and audit capture.

Everything here is deterministic and in-process. The scripted model replays a script
written by a person; it is never a real model and is named so wherever it appears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from handrail.calls import ToolCall
from handrail.clock import FixedClock
from handrail.envelope import Envelope
from handrail.record.audit import MemoryAuditSink
from handrail.store.memory import MemoryStore

__all__ = [
    "FixedClock",
    "MemoryAuditSink",
    "MemoryStore",
    "ModelTurn",
    "ScriptExhaustedError",
    "ScriptStep",
    "ScriptedModel",
    "sequential_ids",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTurn:
    """What a model says in one turn: tool calls to propose, or final text."""

    calls: tuple[ToolCall, ...] = ()
    text: str | None = None


ScriptStep = ModelTurn | Callable[[Sequence[Envelope]], ModelTurn]
"""A fixed turn, or a function of the previous turn's envelopes (to script repairs)."""


class ScriptExhaustedError(RuntimeError):
    """The scripted model was asked for more turns than its script has."""


class ScriptedModel:
    """A stand-in for a model that replays a script, turn by turn.

    Each step is a ModelTurn or a callable that receives the envelopes of the previous
    turn and returns the next ModelTurn, so that a script can react to refusals the
    way a model repairing its arguments would.
    """

    name = "scripted-model"

    def __init__(self, steps: Sequence[ScriptStep]) -> None:
        self._steps = list(steps)
        self._position = 0

    @property
    def finished(self) -> bool:
        """True when every step has been played."""
        return self._position >= len(self._steps)

    def next_turn(self, previous: Sequence[Envelope] = ()) -> ModelTurn:
        """The next scripted turn; raises ScriptExhaustedError past the end."""
        if self.finished:
            msg = f"the script has only {len(self._steps)} turns"
            raise ScriptExhaustedError(msg)
        step = self._steps[self._position]
        self._position += 1
        return step(previous) if callable(step) else step


def sequential_ids(prefix: str = "id") -> Callable[[], str]:
    """An id source that yields `prefix-1`, `prefix-2`, ...; for reproducible trails."""
    counter = 0

    def next_id() -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}-{counter}"

    return next_id
