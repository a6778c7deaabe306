"""The agent loop's test world, and a script that drives one run step in its own process.

`world(...)` builds a registry (a read tool, a confirmed ticket write and an unconfirmed
command-keyed write, both writing to an effects file), a Gate, Writes and an AgentLoop
over a given store. Run as a script against a SQLite file, it starts a run (which
suspends on the ticket write) or resumes one with a plan id and token, and prints the
outcome as one JSON line. The model is always a ScriptedModelClient: no real model.

    python _agent_worker.py start DB EFFECTS RUN_ID
    python _agent_worker.py resume DB EFFECTS RUN_ID PLAN_ID TOKEN
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: reach tests/_write_tools.py
    sys.path.insert(0, str(HERE.parent))

from _write_tools import keyring  # noqa: E402
from handrail import (  # noqa: E402
    ConfirmationMode,
    ConfirmationPolicy,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    NotFound,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Tool,
    ToolCall,
    ToolContext,
    Writes,
    tool,
)
from handrail.loop.agent import AgentLoop, RunOutcome  # noqa: E402
from handrail.loop.answers import EvidenceChecker  # noqa: E402
from handrail.loop.budgets import RunBudget  # noqa: E402
from handrail.loop.models import ModelClient, ModelReply, ScriptedModelClient, Usage  # noqa: E402
from handrail.store import SqliteStore, Store  # noqa: E402
from handrail.testing import FixedClock, sequential_ids  # noqa: E402

ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"assets.read", "tickets.create"}),
)
BOB = Principal(user_id="bob", tenant_id="t1", permissions=ALICE.permissions)
MALLORY = Principal(user_id="alice", tenant_id="t2", permissions=ALICE.permissions)
TICKET_ARGS = {"asset_id": "asset-1", "reason": "CONNECT_TIMEOUT since 09:30"}
ASSETS = {"asset-1": "down", "asset-2": "up"}


class Effects:
    """A downstream ticket system kept in a file: one line per ticket, by key.

    A file, so that two processes share it; a key already present is not written again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def lines(self) -> list[str]:
        if not self.path.exists():
            return []
        return self.path.read_text(encoding="utf-8").splitlines()

    def commit(self, key: str, asset: str) -> str:
        with self._lock:
            lines = self.lines()
            for number, line in enumerate(lines, start=1):
                if line.split("\t")[0] == key:
                    return f"TK-{number:04d}"
            with self.path.open("a", encoding="utf-8") as out:
                out.write(f"{key}\t{asset}\n")
            return f"TK-{len(lines) + 1:04d}"


@dataclass
class Reads:
    """What the read tool answers, and how often it ran."""

    calls: int = 0


def _write_tool(effects: Effects, *, name: str, confirmed: bool) -> Tool:
    async def create(
        ctx: ToolContext,
        asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")],
        reason: Annotated[str, Field(min_length=5, max_length=200)],
    ) -> dict[str, object]:
        """Open a recovery ticket for an asset."""
        assert ctx.idempotency_key is not None
        return {"ticket_no": effects.commit(ctx.idempotency_key, asset_id), "reason": reason}

    return tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        name=name,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        idempotency=IdempotencyPolicy(
            mode=IdempotencyMode.PLAN if confirmed else IdempotencyMode.COMMAND_ID
        ),
        confirmation=ConfirmationPolicy(
            mode=ConfirmationMode.CONFIRM if confirmed else ConfirmationMode.NONE
        ),
        business_id="ticket_no",
    )(create)


def build_registry(effects: Effects, reads: Reads | None = None) -> Registry:
    """The tools of every agent-loop test."""
    counter = reads or Reads()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"assets.read"})
    def asset_status(asset_id: Annotated[str, Field(max_length=20)]) -> dict[str, str]:
        """The monitoring state of an asset."""
        counter.calls += 1
        state = ASSETS.get(asset_id)
        if state is None:
            raise NotFound(f"There is no asset {asset_id!r}.")
        return {"asset_id": asset_id, "state": state}

    registry = Registry()
    registry.register(asset_status)
    registry.register(_write_tool(effects, name="create_ticket", confirmed=True))
    registry.register(_write_tool(effects, name="note_ticket", confirmed=False))
    return registry


def replay_registry() -> Registry:
    """The registry for `handrail replay --app`: writes are never run in a replay."""
    return build_registry(Effects(Path("/nonexistent/replay-effects")))


@dataclass
class World:
    store: Store
    clock: FixedClock
    effects: Effects
    reads: Reads
    gate: Gate
    writes: Writes
    checker: EvidenceChecker

    def loop(
        self, model: ModelClient, budget: RunBudget | None = None, **options: Any
    ) -> AgentLoop:
        """An AgentLoop over this world; `options` are AgentLoop's other keywords."""
        return AgentLoop(
            gate=self.gate,
            model=model,
            store=self.store,
            budget=budget or RunBudget(max_steps=10, deadline_seconds=60.0),
            clock=self.clock,
            checker=self.checker,
            writes=self.writes,
            new_run_id=sequential_ids("run"),
            **options,
        )


def world(store: Store, effects_path: Path, *, plan_prefix: str = "p") -> World:
    """Everything a run needs over `store`; plan ids are `{plan_prefix}-N`."""
    clock = FixedClock()
    effects = Effects(effects_path)
    reads = Reads()
    registry = build_registry(effects, reads)
    writes = Writes(
        registry,
        store,
        keyring(nonce_prefix=plan_prefix),
        clock=clock,
        worker_id=f"w-{plan_prefix}",
        new_id=sequential_ids(plan_prefix),
    )
    gate = Gate(registry, writes=writes, clock=clock)
    checker = EvidenceChecker(store, business_id_patterns=[r"\bTK-\d+\b"])
    return World(store, clock, effects, reads, gate, writes, checker)


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    """A scripted call with JSON-text arguments, as OpenAI sends them."""
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments), provider="scripted")


def reply(
    *calls: ToolCall,
    text: str | None = None,
    usage: tuple[int, int] = (0, 0),
) -> ModelReply:
    """One scripted model reply."""
    return ModelReply(
        calls=calls,
        text=text,
        usage=Usage(input_tokens=usage[0], output_tokens=usage[1]),
        finish_reason="tool_calls" if calls else "stop",
        model="scripted-model",
    )


def answer(state: str, message: str, **evidence: str) -> ModelReply:
    """A scripted final answer, as the JSON object the loop asks for."""
    items = [{"tool": evidence.pop("tool"), **evidence}] if evidence else []
    return reply(text=json.dumps({"state": state, "message": message, "evidence": items}))


def outcome_json(outcome: RunOutcome) -> str:
    """What the script prints: the parts of an outcome a test checks."""
    return json.dumps(
        {
            "run_id": outcome.run_id,
            "status": outcome.status.value,
            "steps": outcome.steps,
            "plan_ids": list(outcome.plan_ids),
            "state": None if outcome.answer is None else outcome.answer.answer.state.value,
            "claimed": None if outcome.answer is None else outcome.answer.claimed.value,
        },
    )


async def _main(argv: Sequence[str]) -> RunOutcome:
    command, db, effects_file, run_id, *rest = argv
    store = SqliteStore.open(Path(db))
    try:
        # Each process draws its own plan ids and nonces, as separate workers would.
        made = world(store, Path(effects_file), plan_prefix=f"{command[0]}{len(rest)}")
        if command == "start":
            model = ScriptedModelClient(
                [reply(call("c1", "create_ticket", **TICKET_ARGS), usage=(100, 20))]
            )
            return await made.loop(model).run("Open a ticket for asset-1", ALICE, run_id=run_id)
        plan_id, token = rest
        model = ScriptedModelClient(
            [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
        )
        return await made.loop(model).resume(run_id, ALICE, plan_id=plan_id, token=token)
    finally:
        store.close()


def main(argv: Sequence[str]) -> int:
    """Run one command; print its outcome as one JSON line."""
    outcome = asyncio.run(_main(argv))
    sys.stdout.write(outcome_json(outcome) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
