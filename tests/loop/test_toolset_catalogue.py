"""The agent loop with the real search tool and real skills over SQLite and PostgreSQL.

No stand-ins: `search_tools_tool`, a `SkillLibrary` loaded from disk and its
`skill_tools`. A run searches, loads a skill (which narrows), and suspends on the
confirmed write it discovered; a new AgentLoop over a new store connection and a
registry built again (as another process would) resumes it, and the discovered read
is still callable; a replay derives the discoveries and the skill again. Without a
PostgreSQL server the PostgreSQL case is skipped, except under CI=true.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _agent_worker import answer, call, reply

from _integ_catalogue import (
    ALICE,
    BILLING_SKILL,
    CORE,
    LOOKUP,
    REFUND,
    build_registry,
    write_library,
)
from _toolset_tools import names_of
from _write_tools import keyring
from handrail import Gate, ToolCall, Writes
from handrail.loop._agent_record import ToolsetChange
from handrail.loop._run_log import read_run
from handrail.loop._toolset import ToolsetOptions
from handrail.loop.agent import AgentLoop, RunStatus
from handrail.loop.answers import EvidenceChecker
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelClient, ScriptedModelClient
from handrail.store import PostgresStore, SqliteStore, Store
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio

NARROWED = {LOOKUP, REFUND, "search_tools", "load_skill", "read_skill_file"}


def _open(url: str) -> Store:
    """A new connection to the store at `url`, as another process would open it."""
    if url.startswith("postgresql://"):
        return PostgresStore.open(url)
    return SqliteStore.open(Path(url))


def _load(call_id: str, skill: str) -> ToolCall:
    """A scripted `load_skill` call (its argument is called `name`, as `call`'s is)."""
    arguments = json.dumps({"name": skill})
    return ToolCall(id=call_id, name="load_skill", arguments=arguments, provider="scripted")


class _Process:
    """Everything one process builds: a registry, a store connection, writes, a gate."""

    def __init__(self, url: str, skills: Path, refunds: list[str], prefix: str) -> None:
        self.clock = FixedClock()
        registry, self.library = build_registry(skills, refunds=refunds, clock=self.clock)
        self.store = _open(url)
        self.writes = Writes(
            registry,
            self.store,
            keyring(nonce_prefix=prefix),
            clock=self.clock,
            worker_id=f"w-{prefix}",
            new_id=sequential_ids(prefix),
        )
        self.gate = Gate(registry, writes=self.writes, clock=self.clock)

    def loop(self, model: ModelClient) -> AgentLoop:
        return AgentLoop(
            gate=self.gate,
            model=model,
            store=self.store,
            budget=RunBudget(max_steps=10, deadline_seconds=60.0),
            clock=self.clock,
            writes=self.writes,
            checker=EvidenceChecker(self.store, business_id_patterns=[r"\bRF-\d+\b"]),
            toolset=ToolsetOptions(skills=self.library),
        )


async def test_a_discovery_and_a_skill_survive_suspend_resume_elsewhere_and_replay(
    store_url: str, tmp_path: Path
) -> None:
    skills = write_library(tmp_path / "skills")
    refunds: list[str] = []
    first = _Process(store_url, skills, refunds, "a")
    model = ScriptedModelClient(
        [
            reply(call("c1", "search_tools", query="refund an invoice")),
            reply(_load("c2", BILLING_SKILL)),
            reply(call("c3", REFUND, invoice="INV-7")),
        ]
    )
    try:
        outcome = await first.loop(model).run("Refund INV-7", ALICE, run_id="r1")
        assert outcome.status is RunStatus.SUSPENDED
        (plan_id,) = outcome.plan_ids
        token = await first.writes.issue_token(plan_id, ALICE)
    finally:
        first.store.close()
    assert [names_of(r.tools) for r in model.requests] == [
        set(CORE),
        CORE | {LOOKUP, REFUND},
        NARROWED,
    ]
    assert refunds == []

    second = _Process(store_url, skills, refunds, "b")
    after = ScriptedModelClient(
        [reply(call("c4", LOOKUP, invoice="INV-7")), answer("need_information", "Refunded.")]
    )
    try:
        done = await second.loop(after).resume("r1", ALICE, plan_id=plan_id, token=token.value)
        assert done.status is RunStatus.FINISHED
        assert refunds == ["INV-7"]
        # Still discovered and still narrowed by the skill after the resume elsewhere.
        assert names_of(after.requests[0].tools) == NARROWED
        record = second.store.get_run("r1")
        assert record is not None
        data = read_run(record)
        assert [c.describe() for c in data.steps[-1].calls] == ["ok"]
        assert data.toolset == (
            ToolsetChange(step=1, kind="discovered", source="search_tools", names=(REFUND, LOOKUP)),
            ToolsetChange(step=2, kind="skill", source="load_skill", names=(BILLING_SKILL,)),
        )
        replayer = ScriptedModelClient(data.replies)
        report = await second.loop(replayer).replay("r1", model=replayer)
        assert report.matched, report.differences
        assert [names_of(r.tools) for r in replayer.requests] == [
            set(CORE),
            CORE | {LOOKUP, REFUND},
            NARROWED,
            NARROWED,
            NARROWED,
        ]
    finally:
        second.store.close()
    # The replay ran no write again.
    assert refunds == ["INV-7"]
