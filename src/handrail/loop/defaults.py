"""The agent loop with safe defaults: a bounded budget and an evidence checker over the store.

Owns `DEFAULT_BUDGET` and `agent_loop`, which fills in what an `AgentLoop` needs and a
newcomer should not have to choose first. Every default is finite; nothing here runs a
model or a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handrail.clock import Clock, SystemClock
from handrail.loop.agent import AgentLoop
from handrail.loop.answers import EvidenceChecker
from handrail.loop.budgets import RunBudget

if TYPE_CHECKING:
    from handrail.gate import Gate
    from handrail.loop.models import ModelClient
    from handrail.store.base import Store
    from handrail.writes.service import Writes

__all__ = ["DEFAULT_BUDGET", "agent_loop"]

DEFAULT_BUDGET = RunBudget(
    max_steps=20,
    deadline_seconds=300.0,
    max_input_tokens=400_000,
    max_output_tokens=40_000,
    max_tool_calls=60,
)
"""Twenty model turns, five active minutes, 400k input and 40k output tokens, 60 calls.

The identical-call and same-error breakers keep RunBudget's defaults (three each).
"""


def agent_loop(
    *,
    gate: Gate,
    model: ModelClient,
    store: Store,
    writes: Writes | None = None,
    clock: Clock | None = None,
    budget: RunBudget | None = None,
    checker: EvidenceChecker | None = None,
    **options: Any,  # noqa: ANN401 - passed on to AgentLoop as they are
) -> AgentLoop:
    """An AgentLoop over `gate`, with `DEFAULT_BUDGET` and an EvidenceChecker of `store`.

    Give `writes` (the gate's) so that suspended runs can be resumed. Any other keyword
    (`system`, `exposure`, `marker`, `new_run_id`, ...) goes to `AgentLoop` unchanged.
    """
    return AgentLoop(
        gate=gate,
        model=model,
        store=store,
        budget=DEFAULT_BUDGET if budget is None else budget,
        clock=SystemClock() if clock is None else clock,
        checker=EvidenceChecker(store) if checker is None else checker,
        writes=writes,
        **options,
    )
