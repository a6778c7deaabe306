"""The agent loop: a model, the gate, hard budgets and evidence-checked final answers.

`agent_loop(...)` builds an `AgentLoop` with safe defaults (`DEFAULT_BUDGET`, an evidence
checker over the store); `Handrail.agent(model)` is the same over an opened application.
"""

from handrail.loop.defaults import DEFAULT_BUDGET, agent_loop

__all__ = ["DEFAULT_BUDGET", "agent_loop"]
