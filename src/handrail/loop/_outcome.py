"""What a run's `run`, `resume`, `take_over` or `cancel` returns: where the run stands.

Owns `RunOutcome`, a value the loop builds from its session; it decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from handrail.adapters.transcript import Turn
from handrail.loop._agent_record import RunStatus
from handrail.loop.answers import CheckedAnswer, TextCheck
from handrail.loop.budgets import BudgetTrip
from handrail.loop.final import RunAnswer

__all__ = ["RunOutcome"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    """Where a run stands after `run`, `resume` or `take_over` returned.

    FINISHED: `final` is the answer in one shape (`RunAnswer`: what to show, the state,
    the evidence check's verdict); `answer` (a structured answer after the check) or,
    for free text, `text` and `text_check` are its details. SUSPENDED: `plan_ids` await
    a person. BUDGET_EXHAUSTED: `trip` says which budget. FAILED: `error` is the model
    error's code, or CANCELLED (after `cancel`, `plan_ids` are the plans it declined).
    `new_turns` are the run's turns from its task on (after a resume, all
    of them), for a host that keeps the history itself.
    """

    run_id: str
    status: RunStatus
    steps: int
    answer: CheckedAnswer | None = None
    text: str | None = None
    text_check: TextCheck | None = None
    plan_ids: tuple[str, ...] = ()
    trip: BudgetTrip | None = None
    error: str | None = None
    final: RunAnswer | None = None
    new_turns: tuple[Turn, ...] = ()
