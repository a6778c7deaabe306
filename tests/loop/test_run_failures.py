"""A run that an unexpected exception stops is stored FAILED with INTERNAL, never left RUNNING.

A checker's bug, a model client's bug, a store error between two steps: the run is
stored FAILED, its conversation is free for the next run, and the exception reaches
the caller. When the store is down, storing the end fails too: the run is left as
it was and the exception still propagates; once its deadline has passed, `cancel`
clears it. Every model is a ScriptedModelClient; the Gate, Writes and stores are real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from handrail import ErrorCode
from handrail.adapters.transcript import UserTurn
from handrail.errors import StoreError
from handrail.loop.agent import INTERNAL, AgentLoop, RunRefusedError, RunStatus, read_run
from handrail.loop.answers import EvidenceChecker, TextCheck
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelClient, ModelRequest, ScriptedModelClient
from handrail.principal import Principal
from handrail.runs import RunRecord, RunState
from handrail.store import Store
from handrail.testing import sequential_ids

pytestmark = pytest.mark.anyio

CHAT = "chat-1"


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


class _BrokenChecker(EvidenceChecker):
    """An evidence checker with a bug: every check raises."""

    async def check_text(self, text: str, principal: Principal) -> TextCheck:
        del text, principal
        msg = "checker bug"
        raise RuntimeError(msg)

    async def check(self, *args: Any, **kwargs: Any) -> Any:
        del args, kwargs
        msg = "checker bug"
        raise RuntimeError(msg)


class _FlakyStore:
    """The test's store, except that `update_run` raises StoreError while `down`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False
        self.fail_next = 0

    def update_run(self, record: RunRecord, *, expect_version: int) -> bool:
        if self.down or self.fail_next:
            self.fail_next = max(0, self.fail_next - 1)
            msg = "the database went away"
            raise StoreError(msg)
        return self._store.update_run(record, expect_version=expect_version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _loop(made: World, model: ModelClient, **changes: Any) -> AgentLoop:
    options: dict[str, Any] = {
        "gate": made.gate,
        "model": model,
        "store": made.store,
        "budget": RunBudget(max_steps=10, deadline_seconds=60.0),
        "clock": made.clock,
        "checker": made.checker,
        "writes": made.writes,
        "new_run_id": sequential_ids("run"),
    }
    options.update(changes)
    return AgentLoop(**options)


def _stored(made: World, run_id: str) -> tuple[RunState, str | None]:
    record = made.store.get_run(run_id)
    assert record is not None
    end = read_run(record).end
    return record.state, None if end is None else end.error


async def _next_run_in_chat_finishes(made: World, run_id: str) -> None:
    model = ScriptedModelClient([answer("need_information", "What next?")])
    outcome = await made.loop(model).run("Next", ALICE, conversation_id=CHAT, run_id=run_id)
    assert outcome.status is RunStatus.FINISHED
    assert model.requests[0].transcript[-1] == UserTurn(text="Next")


async def test_a_checker_that_raises_stores_the_run_failed_and_frees_its_conversation(
    made: World,
) -> None:
    model = ScriptedModelClient([answer("failed", "Asset-1 is down.")])
    loop = _loop(made, model, checker=_BrokenChecker(made.store))
    with pytest.raises(RuntimeError, match="checker bug"):
        await loop.run("Is asset-1 up?", ALICE, conversation_id=CHAT, run_id="r1")
    assert _stored(made, "r1") == (RunState.FAILED, INTERNAL)
    turns = await made.loop(model).conversation(CHAT, ALICE)
    assert turns[0] == UserTurn(text="Is asset-1 up?")
    await _next_run_in_chat_finishes(made, "r2")


async def test_a_model_client_that_raises_stores_the_run_failed(made: World) -> None:
    def broken(_request: ModelRequest) -> Any:
        msg = "client bug"
        raise KeyError(msg)

    model = ScriptedModelClient([reply(call("c1", "asset_status", asset_id="asset-1")), broken])
    with pytest.raises(KeyError):
        await made.loop(model).run("Look", ALICE, conversation_id=CHAT, run_id="r1")
    assert _stored(made, "r1") == (RunState.FAILED, INTERNAL)
    # The run's step before the bug is kept, in the run and in its conversation.
    assert len(await made.loop(model).conversation(CHAT, ALICE)) == 3
    await _next_run_in_chat_finishes(made, "r2")


async def test_a_streamed_run_that_raises_is_stored_failed_and_the_reader_gets_the_error(
    made: World,
) -> None:
    model = ScriptedModelClient([answer("failed", "Down.")])
    loop = _loop(made, model, checker=_BrokenChecker(made.store))
    with pytest.raises(RuntimeError, match="checker bug"):
        async for _event in loop.stream("Look", ALICE, run_id="r1", conversation_id=CHAT):
            pass
    assert _stored(made, "r1") == (RunState.FAILED, INTERNAL)
    await _next_run_in_chat_finishes(made, "r2")


async def test_a_store_error_between_steps_stores_the_run_failed_once_the_store_answers(
    made: World,
) -> None:
    flaky = _FlakyStore(made.store)
    flaky.fail_next = 1  # the first step's RUNNING save fails; storing the end works
    model = ScriptedModelClient([reply(call("c1", "asset_status", asset_id="asset-1"))])
    loop = _loop(made, model, store=flaky)
    with pytest.raises(StoreError):
        await loop.run("Look", ALICE, conversation_id=CHAT, run_id="r1")
    assert _stored(made, "r1") == (RunState.FAILED, INTERNAL)
    await _next_run_in_chat_finishes(made, "r2")


async def test_a_resumed_run_that_raises_is_stored_failed_not_left_running(made: World) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    suspended = await made.loop(model).run("Ticket", ALICE, conversation_id=CHAT, run_id="r1")
    (plan_id,) = suspended.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    after = ScriptedModelClient([answer("failed", "Done?")])
    loop = _loop(made, after, checker=_BrokenChecker(made.store))
    with pytest.raises(RuntimeError, match="checker bug"):
        await loop.resume("r1", ALICE, plan_id=plan_id, token=token.value)
    assert _stored(made, "r1") == (RunState.FAILED, INTERNAL)
    assert len(made.effects.lines()) == 1
    await _next_run_in_chat_finishes(made, "r2")


async def test_when_the_store_is_down_the_error_propagates_and_cancel_clears_the_run_later(
    made: World,
) -> None:
    flaky = _FlakyStore(made.store)
    flaky.down = True
    model = ScriptedModelClient([reply(call("c1", "asset_status", asset_id="asset-1"))])
    loop = _loop(made, model, store=flaky)
    with pytest.raises(StoreError) as down:
        await loop.run("Look", ALICE, conversation_id=CHAT, run_id="r1")
    assert any("could not be stored FAILED" in note for note in down.value.__notes__)
    # The run is left as it was: RUNNING, and its chat refuses a new run.
    assert _stored(made, "r1") == (RunState.RUNNING, None)
    with pytest.raises(RunRefusedError) as held:
        await _next_run_in_chat_finishes(made, "r2")
    assert held.value.code is ErrorCode.CONFLICT
    flaky.down = False
    with pytest.raises(RunRefusedError) as early:
        await loop.cancel("r1", ALICE, reason="It hangs.")
    assert early.value.code is ErrorCode.CONFLICT
    made.clock.advance(60.0 + 60.0 + 1.0)  # its deadline and the grace margin
    outcome = await loop.cancel("r1", ALICE, reason="It hangs.")
    assert (outcome.status, outcome.error) == (RunStatus.FAILED, "CANCELLED")
    assert _stored(made, "r1") == (RunState.FAILED, "CANCELLED")
    await _next_run_in_chat_finishes(made, "r3")
