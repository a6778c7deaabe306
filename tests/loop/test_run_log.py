"""A run is stored as a header and appended entries: each step adds one entry with only
what it added, the header does not grow with the run, and the run reads back whole.

Runs stored whole (document versions 1, 2 and 4) still read, and their next save stores
everything so far in one entry. Every model is a ScriptedModelClient; stores are real.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from _agent_worker import ALICE, World, answer, call, reply, world

from handrail.loop.agent import RunStatus, read_run
from handrail.loop.budgets import BudgetTracker, RunBudget
from handrail.loop.models import ScriptedModelClient
from handrail.runs import RunRecord, RunState
from handrail.store import Store

pytestmark = pytest.mark.anyio

STEPS = 3  # the default budget allows three identical calls


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


def _script() -> ScriptedModelClient:
    replies = [reply(call(f"c{n}", "asset_status", asset_id="asset-1")) for n in range(STEPS)]
    return ScriptedModelClient([*replies, answer("need_information", "Asset-1 is down.")])


async def test_each_step_appends_one_entry_and_the_header_stays_small(made: World) -> None:
    outcome = await made.loop(_script()).run("Is asset-1 up?", ALICE, run_id="r1")
    assert outcome.status is RunStatus.FINISHED
    record = made.store.get_run("r1")
    assert record is not None
    # The insert's entry (the task), one per step, one for the end.
    assert len(record.entries) == STEPS + 2 == record.version
    header = json.loads(record.data)
    assert header["version"] == 5
    assert "transcript" not in header
    assert "replies" not in header
    for entry in record.entries[1:-1]:
        document = json.loads(entry)
        # Only the step's own turns: its call and its result, never an earlier step's.
        assert [turn["kind"] for turn in document["turns"]] == ["assistant", "results"]
        assert len(document["replies"]) == len(document["steps"]) == 1
    data = read_run(record)
    assert data.transcript == outcome.new_turns
    assert len(data.replies) == STEPS + 1
    assert len(data.steps) == STEPS
    # The budget reads back as the tracker had it: every identical call counted.
    assert data.budget["identical"][0][2] == STEPS
    assert data.budget["tool_calls"] == STEPS


async def test_a_run_stored_whole_reads_and_its_next_save_appends_it_all(made: World) -> None:
    budget = RunBudget(max_steps=10, deadline_seconds=60.0)
    await made.loop(_script()).run("Is asset-1 up?", ALICE, run_id="r1")
    first = made.store.get_run("r1")
    assert first is not None
    whole = read_run(first)
    # The same run as an older Handrail stored it: one document, no entries.
    legacy = RunRecord(
        run_id="r2",
        tenant_id=first.tenant_id,
        user_id=first.user_id,
        state=RunState.RUNNING,
        version=1,
        # Stopped a day ago: past its deadline, so it may be cancelled.
        created_at=first.created_at - timedelta(days=1),
        updated_at=first.created_at - timedelta(days=1),
        data=whole.to_json(),
    )
    assert json.loads(legacy.data)["version"] == 4
    assert made.store.insert_run(legacy)
    stored = made.store.get_run("r2")
    assert stored is not None
    assert read_run(stored) == whole
    # A run of that document moves on in the new layout and keeps everything.
    tracker = BudgetTracker.restore(whole.budget, budget, made.clock)
    assert tracker.snapshot()["identical"] == whole.budget["identical"]
    outcome = await made.loop(_script()).cancel("r2", ALICE, reason="stopped long ago")
    assert outcome.status is RunStatus.FAILED
    after = made.store.get_run("r2")
    assert after is not None
    assert json.loads(after.data)["version"] == 5
    assert len(after.entries) == 1
    moved = read_run(after)
    assert moved.transcript[: len(whole.transcript)] == whole.transcript
    assert (moved.replies, moved.steps, moved.keys) == (whole.replies, whole.steps, whole.keys)
    assert moved.budget["identical"] == whole.budget["identical"]
