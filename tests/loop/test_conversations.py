"""Runs over a conversation: a host's history in, the run's new turns out, and chats kept
in the store across runs, loop instances and processes.

A run starts from the history it is given or from its stored conversation's turns;
it appends its own turns to the conversation when it stops (and when a resume adds
more); the run's document refers to the conversation instead of copying it; the
gate's guard knows every run of a chat by the chat's id; one run at a time holds it.
Every model is a ScriptedModelClient; the Gate, Writes and stores are real.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from _stores import empty_postgres_store
from handrail import ErrorCode, Gate, Principal
from handrail.adapters.transcript import AssistantTurn, ToolResultsTurn, Turn, UserTurn
from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import Decision, Outcome
from handrail.errors import ConfigurationError
from handrail.loop.agent import AgentLoop, RunData, RunRefusedError, RunStatus, read_run
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelError, ModelReply, ModelRequest, ScriptedModelClient
from handrail.runs import RunState
from handrail.store import PostgresStore, SqliteStore, Store

pytestmark = pytest.mark.anyio

CHAT = "chat-1"
HELLO: tuple[Turn, ...] = (
    UserTurn(text="Hello, which assets do you watch?"),
    AssistantTurn(text="asset-1 and asset-2."),
)


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


class _Down:
    """A model that cannot be reached: its runs end FAILED."""

    name = "down"

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        del request, timeout
        raise ModelError("down", provider="scripted", code=ErrorCode.TRANSIENT)


def _turns_of(made: World, run_id: str) -> tuple[tuple[Turn, ...], tuple[Turn, ...]]:
    """The stored run's own transcript and the history its document keeps itself."""
    record = made.store.get_run(run_id)
    assert record is not None
    data = read_run(record)
    return data.transcript, data.history


# --- history in, new turns out -----------------------------------------------------------------


async def test_a_run_sees_its_history_before_its_task_and_returns_only_its_own_turns(
    made: World,
) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), answer("failed", "It is down.")]
    )
    outcome = await made.loop(model).run("Is asset-1 up?", ALICE, history=HELLO)
    assert outcome.status is RunStatus.FINISHED
    first, second = model.requests
    assert first.transcript == (*HELLO, UserTurn(text="Is asset-1 up?"))
    assert second.transcript[: len(HELLO)] == HELLO
    task, calls, results, final = outcome.new_turns
    assert task == UserTurn(text="Is asset-1 up?")
    assert isinstance(calls, AssistantTurn)
    assert [c.id for c in calls.calls] == ["c1"]
    assert isinstance(results, ToolResultsTurn)
    assert isinstance(final, AssistantTurn)
    assert second.transcript == (*HELLO, task, calls, results)
    # The run's document keeps the host's history once, apart from its own turns.
    assert _turns_of(made, outcome.run_id) == (outcome.new_turns, HELLO)


async def test_a_hosts_kept_history_of_new_turns_is_accepted_by_the_next_run(
    made: World,
) -> None:
    first = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), answer("failed", "Down.")]
    )
    one = await made.loop(first).run("Is asset-1 up?", ALICE, history=HELLO)
    kept = (*HELLO, *one.new_turns)
    second = ScriptedModelClient([answer("need_information", "Which one?")])
    two = await made.loop(second).run("And the other?", ALICE, history=kept, run_id="r2")
    assert two.status is RunStatus.FINISHED
    assert second.requests[0].transcript == (*kept, UserTurn(text="And the other?"))


async def test_every_stop_returns_the_runs_turns_from_its_task_on(made: World) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    suspended = await made.loop(model).run("Open a ticket", ALICE, history=HELLO)
    assert suspended.status is RunStatus.SUSPENDED
    assert suspended.new_turns[0] == UserTurn(text="Open a ticket")
    assert len(suspended.new_turns) == 3
    failed = await made.loop(_Down()).run("Look", ALICE, run_id="r2")
    assert failed.status is RunStatus.FAILED
    assert failed.new_turns == (UserTurn(text="Look"),)


# --- stored conversations ----------------------------------------------------------------------


async def test_a_run_in_a_new_conversation_creates_it_for_its_principal(made: World) -> None:
    model = ScriptedModelClient([answer("need_information", "Which asset?")])
    outcome = await made.loop(model).run("Help", ALICE, conversation_id=CHAT)
    assert model.requests[0].transcript == (UserTurn(text="Help"),)
    assert await made.loop(model).conversation(CHAT, ALICE) == outcome.new_turns
    (record,) = made.store.list_conversations(tenant_id="t1", user_id="alice")
    assert (record.conversation_id, record.turns, record.run_id) == (CHAT, 2, outcome.run_id)
    transcript, history = _turns_of(made, outcome.run_id)
    assert (transcript, history) == (outcome.new_turns, ())


async def test_the_next_run_of_a_conversation_starts_from_its_turns_and_stores_a_reference(
    made: World,
) -> None:
    first = ScriptedModelClient([answer("need_information", "Which asset?")])
    one = await made.loop(first).run("Help", ALICE, conversation_id=CHAT)
    second = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), answer("failed", "Down.")]
    )
    two = await made.loop(second).run("asset-1", ALICE, conversation_id=CHAT, run_id="r2")
    assert second.requests[0].transcript == (*one.new_turns, UserTurn(text="asset-1"))
    chat = await made.loop(second).conversation(CHAT, ALICE)
    assert chat == (*one.new_turns, *two.new_turns)
    record = made.store.get_run(two.run_id)
    assert record is not None
    data = read_run(record)
    # Only a reference to the conversation: storage does not grow with its square.
    assert data.conversation is not None
    assert (data.conversation.conversation_id, data.conversation.start) == (CHAT, 2)
    assert data.history == ()
    assert data.transcript == two.new_turns
    assert "Which asset?" not in record.data


async def test_a_conversation_is_refused_with_a_history_and_a_malformed_id(made: World) -> None:
    loop = made.loop(ScriptedModelClient([answer("failed", "No.")]))
    with pytest.raises(ConfigurationError, match="pass no history"):
        await loop.run("Help", ALICE, conversation_id=CHAT, history=HELLO)
    with pytest.raises(ConfigurationError, match="conversation id"):
        await loop.run("Help", ALICE, conversation_id="chat 1")
    assert made.store.list_runs() == []
    assert made.store.list_conversations(tenant_id="t1") == []


async def test_a_suspended_run_holds_its_conversation_and_its_resume_appends(
    made: World,
) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    suspended = await made.loop(model).run("Open a ticket", ALICE, conversation_id=CHAT)
    assert suspended.status is RunStatus.SUSPENDED
    loop = made.loop(ScriptedModelClient([answer("failed", "Never asked.")]))
    assert await loop.conversation(CHAT, ALICE) == suspended.new_turns
    with pytest.raises(RunRefusedError) as held:
        await loop.run("Something else", ALICE, conversation_id=CHAT, run_id="second")
    assert held.value.code is ErrorCode.CONFLICT
    assert suspended.run_id in held.value.message
    assert made.store.get_run("second") is None
    (plan_id,) = suspended.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await made.loop(finish).resume(
        suspended.run_id, ALICE, plan_id=plan_id, token=token.value
    )
    assert done.status is RunStatus.FINISHED
    # The resumed model saw the whole chat; the resume appended what it added.
    assert finish.requests[0].transcript[:3] == suspended.new_turns
    assert done.new_turns[:3] == suspended.new_turns
    assert len(done.new_turns) == 5
    assert await loop.conversation(CHAT, ALICE) == done.new_turns
    # Now the conversation is free again.
    after = ScriptedModelClient([answer("need_information", "Anything else?")])
    third = await made.loop(after).run("Thanks", ALICE, conversation_id=CHAT, run_id="third")
    assert after.requests[0].transcript == (*done.new_turns, UserTurn(text="Thanks"))
    assert len(await loop.conversation(CHAT, ALICE)) == 5 + len(third.new_turns)


async def test_a_run_started_in_a_conversation_while_another_runs_is_refused(
    made: World,
) -> None:
    refused: list[RunRefusedError] = []

    @dataclass
    class Interrupting:
        """A model that, while its run is RUNNING, starts a second run in the same chat."""

        name: str = "interrupting"

        async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
            del request, timeout
            intruder = made.loop(ScriptedModelClient([answer("failed", "Never asked.")]))
            try:
                await intruder.run("Me too", ALICE, conversation_id=CHAT, run_id="second")
            except RunRefusedError as exc:
                refused.append(exc)
            return answer("need_information", "Which asset?")

    first = await made.loop(Interrupting()).run("Help", ALICE, conversation_id=CHAT)
    assert first.status is RunStatus.FINISHED
    (error,) = refused
    assert error.code is ErrorCode.CONFLICT
    assert first.run_id in error.message
    assert made.store.get_run("second") is None
    assert await made.loop(Interrupting()).conversation(CHAT, ALICE) == first.new_turns


async def test_a_failed_and_an_exhausted_run_append_their_turns_too(made: World) -> None:
    looping = ScriptedModelClient(
        [reply(call(f"c{n}", "asset_status", asset_id="asset-1")) for n in range(20)]
    )
    tight = RunBudget(max_steps=2, deadline_seconds=60.0)
    exhausted = await made.loop(looping, tight).run("Poll", ALICE, conversation_id=CHAT)
    assert exhausted.status is RunStatus.BUDGET_EXHAUSTED
    assert len(exhausted.new_turns) == 5
    failed = await made.loop(_Down()).run("Again", ALICE, conversation_id=CHAT, run_id="r2")
    assert failed.status is RunStatus.FAILED
    chat = await made.loop(looping).conversation(CHAT, ALICE)
    assert chat == (*exhausted.new_turns, UserTurn(text="Again"))


async def test_a_taken_run_id_gives_the_conversation_back(made: World) -> None:
    first = ScriptedModelClient([answer("need_information", "Which asset?")])
    one = await made.loop(first).run("Help", ALICE, conversation_id=CHAT, run_id="r1")
    other = made.loop(ScriptedModelClient([answer("failed", "No.")]))
    with pytest.raises(RunRefusedError) as taken:
        await other.run("Again", ALICE, conversation_id=CHAT, run_id="r1")
    assert taken.value.code is ErrorCode.CONFLICT
    record = made.store.get_conversation(CHAT)
    assert record is not None
    assert (record.run_id, record.turns) == ("r1", len(one.new_turns))
    fresh = made.store.get_conversation("chat-new")
    assert fresh is None
    with pytest.raises(RunRefusedError):
        await other.run("Again", ALICE, conversation_id="chat-new", run_id="r1")
    created = made.store.get_conversation("chat-new")
    assert created is not None
    assert (created.run_id, created.turns) == (None, 0)
    again = ScriptedModelClient([answer("failed", "No.")])
    await made.loop(again).run("Again", ALICE, conversation_id="chat-new", run_id="r2")
    assert again.requests[0].transcript == (UserTurn(text="Again"),)


# --- the guard sees a chat ---------------------------------------------------------------------


class _AssetPolicy:
    """Reads of asset-2 are denied; every decision names the asset as its target."""

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        del principal, context
        asset = getattr(resource, "asset_id", None)
        key = f"asset:{asset}"
        if action == "asset_status" and asset == "asset-2":
            return Decision(outcome=Outcome.DENY, reason="restricted", rule="r", resource_key=key)
        return Decision(outcome=Outcome.ALLOW, reason="ok", rule="ok", resource_key=key)


def _guarded(made: World) -> Gate:
    return Gate(
        made.gate.registry,
        writes=made.writes,
        clock=made.clock,
        policy=_AssetPolicy(),
        guard=ConversationGuard(),
    )


async def test_a_denial_in_one_run_of_a_chat_holds_in_its_next_run(made: World) -> None:
    gate = _guarded(made)

    def loop(model: ScriptedModelClient) -> AgentLoop:
        return AgentLoop(
            gate=gate,
            model=model,
            store=made.store,
            budget=RunBudget(max_steps=10, deadline_seconds=60.0),
            clock=made.clock,
            checker=made.checker,
            writes=made.writes,
        )

    ticket = {"asset_id": "asset-2", "reason": "CONNECT_TIMEOUT since 09:30"}
    denied = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-2")), answer("failed", "Refused.")]
    )
    await loop(denied).run("asset-2?", ALICE, conversation_id=CHAT)
    # The next run of the chat tries the denied target through another tool.
    retry = ScriptedModelClient(
        [reply(call("c2", "create_ticket", **ticket)), answer("failed", "Refused.")]
    )
    two = await loop(retry).run("Open a ticket then", ALICE, conversation_id=CHAT)
    record = made.store.get_run(two.run_id)
    assert record is not None
    (step,) = read_run(record).steps
    assert [c.code for c in step.calls] == [ErrorCode.PERMISSION_DENIED.value]
    # In another chat, the same call becomes a plan as usual.
    elsewhere = ScriptedModelClient([reply(call("c2", "create_ticket", **ticket))])
    other = await loop(elsewhere).run("Open a ticket", ALICE, conversation_id="chat-2")
    assert other.status is RunStatus.SUSPENDED


# --- replay ------------------------------------------------------------------------------------


async def test_a_replay_of_a_run_in_a_conversation_starts_from_its_history(made: World) -> None:
    first = ScriptedModelClient([answer("need_information", "Which asset?")])
    one = await made.loop(first).run("Help", ALICE, conversation_id=CHAT)
    second = ScriptedModelClient(
        [reply(call("c1", "asset_status", asset_id="asset-1")), answer("failed", "Down.")]
    )
    two = await made.loop(second).run("asset-1", ALICE, conversation_id=CHAT, run_id="r2")
    report = await made.loop(first).replay(two.run_id)
    assert report.matched, report.differences
    record = made.store.get_run(two.run_id)
    assert record is not None
    again = ScriptedModelClient(read_run(record).replies)
    assert (await made.loop(first).replay(two.run_id, model=again)).matched
    assert again.requests[0].transcript == (*one.new_turns, UserTurn(text="asset-1"))
    # A replay stores nothing: the conversation is as the two runs left it.
    assert len(await made.loop(first).conversation(CHAT, ALICE)) == 2 + len(two.new_turns)


async def test_a_replay_of_a_run_with_a_hosts_history_starts_from_it(made: World) -> None:
    model = ScriptedModelClient([answer("failed", "Down.")])
    outcome = await made.loop(model).run("asset-1?", ALICE, history=HELLO)
    record = made.store.get_run(outcome.run_id)
    assert record is not None
    again = ScriptedModelClient(read_run(record).replies)
    assert (await made.loop(model).replay(outcome.run_id, model=again)).matched
    assert again.requests[0].transcript == (*HELLO, UserTurn(text="asset-1?"))


# --- across processes --------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens the same database again each call, as a new process would (the first: empty)."""
    opened: list[Store] = []

    def open_store() -> Store:
        made: Store
        if request.param == "sqlite":
            made = SqliteStore.open(tmp_path / "chat.db")
        elif not opened:
            made = empty_postgres_store(request.getfixturevalue("postgres_url"))
        else:
            made = PostgresStore.open(request.getfixturevalue("postgres_url"))
        opened.append(made)
        return made

    yield open_store
    for made in opened:
        made.close()


async def test_a_conversation_continues_in_another_process(
    reopen: Callable[[], Store], tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    before = world(reopen(), effects, plan_prefix="a")
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    one = await before.loop(model).run("Open a ticket", ALICE, conversation_id=CHAT, run_id="a1")
    (plan_id,) = one.plan_ids
    token = await before.writes.issue_token(plan_id, ALICE)
    before.store.close()
    # Another process resumes the run, and a third continues the chat.
    middle = world(reopen(), effects, plan_prefix="b")
    finish = ScriptedModelClient(
        [answer("succeeded", "Opened.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await middle.loop(finish).resume("a1", ALICE, plan_id=plan_id, token=token.value)
    assert done.status is RunStatus.FINISHED
    assert done.final is not None
    assert done.final.verified
    after = world(reopen(), effects, plan_prefix="c")
    next_model = ScriptedModelClient([answer("need_information", "Anything else?")])
    two = await after.loop(next_model).run("Thanks", ALICE, conversation_id=CHAT, run_id="a2")
    assert next_model.requests[0].transcript == (*done.new_turns, UserTurn(text="Thanks"))
    chat = await after.loop(next_model).conversation(CHAT, ALICE)
    assert chat == (*done.new_turns, *two.new_turns)
    state = after.store.get_run("a2")
    assert state is not None
    assert state.state is RunState.FINISHED
    assert len(after.effects.lines()) == 1


def test_a_run_document_of_version_1_reads_as_a_run_without_history() -> None:
    data = RunData(
        task="t",
        principal=ALICE.snapshot(),
        limits=RunBudget(max_steps=3, deadline_seconds=9.0),
        budget={},
        transcript=(UserTurn(text="t"),),
    )
    document = json.loads(data.to_json())
    assert (document["version"], document["history"], document["conversation"]) == (4, [], None)
    del document["history"], document["conversation"], document["toolset"]
    document["version"] = 1
    assert RunData.parse(json.dumps(document)) == data
