"""What a streamed run tells its host as it happens: the typed loop events.

`AgentLoop.stream` and `resume_stream` yield these, in order: the model's text as it
is generated, each call the loop admitted, each call's envelope, the plans that wait
for a person, and last exactly one terminal event (`TERMINAL_EVENTS`). Every event is
a frozen value with the run id. An event never holds a secret, a confirmation token
or anything the envelopes do not already show the model; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.envelope import Envelope
    from handrail.errors import ErrorCode
    from handrail.loop.answers import CheckedAnswer, TextCheck
    from handrail.loop.budgets import BudgetTrip
    from handrail.loop.final import RunAnswer

__all__ = [
    "TERMINAL_EVENTS",
    "BudgetStopped",
    "CallEnvelope",
    "CallProposed",
    "LoopEvent",
    "ModelTextDelta",
    "PlanAwaitingConfirmation",
    "RunFailed",
    "RunFinished",
    "RunSuspended",
    "TerminalEvent",
]


# --- while the run goes on -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTextDelta:
    """A piece of the model's reply text at `step`, as the model streams it (never empty).

    The deltas of one step joined are that reply's text. Only a streaming model client
    sends them; with any other, the text arrives in the final answer.
    """

    run_id: str
    step: int
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CallProposed:
    """A call of the model's turn at `step`, as the call-id ledger admitted it.

    A proposal only: its envelope (`CallEnvelope`) says what came of it. A call whose id
    an earlier turn used arrives marked defective, and the gate refuses it.
    """

    run_id: str
    step: int
    call: ToolCall


@dataclass(frozen=True, kw_only=True, slots=True)
class CallEnvelope:
    """The envelope of one call: exactly what the model is shown as the call's result.

    `step` is the model step that proposed the call, or, for a plan executed by a
    resume, the run's step count when it was executed.
    """

    run_id: str
    step: int
    call_id: str
    envelope: Envelope


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanAwaitingConfirmation:
    """A write became a plan that waits for a person, and the run is stored SUSPENDED.

    `code` is NEEDS_CONFIRMATION or NEEDS_APPROVAL. `summary` and `impact` are the
    envelope's own (the impact is the tool's wording or the model's arguments, so
    untrusted data); `expires_at` is ISO 8601. A token is never part of it: the host
    issues one through `Writes` for the person who confirms.
    """

    run_id: str
    step: int
    plan_id: str
    call_id: str
    tool: str
    code: ErrorCode
    summary: str
    impact: Mapping[str, Any] | None = None
    expires_at: str | None = None


# --- terminal: the last event of a stream --------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    """The model gave its final answer, checked against execution records.

    As in `RunOutcome`: `final` in every case (the one shape to show); `answer` for a
    structured answer, else `text` and `text_check`.
    """

    run_id: str
    steps: int
    final: RunAnswer | None = None
    answer: CheckedAnswer | None = None
    text: str | None = None
    text_check: TextCheck | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSuspended:
    """The run is stored SUSPENDED: `plan_ids` wait for a person; resume by plan id."""

    run_id: str
    steps: int
    plan_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetStopped:
    """A budget tripped; the run ended fail-closed (stored FAILED) with `trip` as its reason."""

    run_id: str
    steps: int
    trip: BudgetTrip


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed:
    """The run ended FAILED without an answer; `error` is the code (a model error's)."""

    run_id: str
    steps: int
    error: str


TerminalEvent = RunFinished | RunSuspended | BudgetStopped | RunFailed
"""The last event of a stream: how the run stopped."""

LoopEvent = (
    ModelTextDelta
    | CallProposed
    | CallEnvelope
    | PlanAwaitingConfirmation
    | RunFinished
    | RunSuspended
    | BudgetStopped
    | RunFailed
)
"""Any event a streamed run yields."""

TERMINAL_EVENTS = (RunFinished, RunSuspended, BudgetStopped, RunFailed)
"""The terminal event types, for `isinstance`."""
