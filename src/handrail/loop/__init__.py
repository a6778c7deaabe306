"""The agent loop: a model, the gate, hard budgets and evidence-checked final answers.

`agent_loop(...)` builds an `AgentLoop` with safe defaults (`DEFAULT_BUDGET`, an evidence
checker over the store); `Handrail.agent(model)` is the same over an opened application.
`AgentLoop.run` returns a `RunOutcome` whose `final` (`RunAnswer`) is the one shape of a
final answer; `AgentLoop.stream` yields the typed events of `handrail.loop.events`; step
hooks implement `StepHooks` (`handrail.loop.hooks`); `ToolsetOptions` lets tool search
and skills change the toolset step by step.
"""

from handrail.loop.agent import AgentLoop, RunOutcome, RunRefusedError, RunStatus, ToolsetOptions
from handrail.loop.budgets import RunBudget
from handrail.loop.defaults import DEFAULT_BUDGET, agent_loop
from handrail.loop.events import (
    TERMINAL_EVENTS,
    BudgetStopped,
    CallEnvelope,
    CallProposed,
    LoopEvent,
    ModelTextDelta,
    PlanAwaitingConfirmation,
    RunFailed,
    RunFinished,
    RunSuspended,
    TerminalEvent,
)
from handrail.loop.final import RunAnswer
from handrail.loop.hooks import HookFailedError, NoHooks, StepHooks
from handrail.loop.leases import RunLeaseWatcher, RunLeasing

__all__ = [
    "DEFAULT_BUDGET",
    "TERMINAL_EVENTS",
    "AgentLoop",
    "BudgetStopped",
    "CallEnvelope",
    "CallProposed",
    "HookFailedError",
    "LoopEvent",
    "ModelTextDelta",
    "NoHooks",
    "PlanAwaitingConfirmation",
    "RunAnswer",
    "RunBudget",
    "RunFailed",
    "RunFinished",
    "RunLeaseWatcher",
    "RunLeasing",
    "RunOutcome",
    "RunRefusedError",
    "RunStatus",
    "RunSuspended",
    "StepHooks",
    "TerminalEvent",
    "ToolsetOptions",
    "agent_loop",
]
