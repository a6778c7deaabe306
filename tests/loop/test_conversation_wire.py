"""A stored conversation stays sendable to every adapter, however each of its runs ended.

Runs of every kind of end follow each other in one conversation (finished with JSON,
text, empty or blank text; a model error; a budget trip before or in the middle of a
turn; a bug; suspended then resumed; suspended then cancelled); after each, the whole
conversation renders with the `to_wire` of all four adapters and passes the loop's
own history check. Every model is a ScriptedModelClient; Gate, Writes and store real.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world
from hypothesis import given
from hypothesis import strategies as st

from handrail import ErrorCode
from handrail.adapters import (
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
)
from handrail.adapters.transcript import Turn
from handrail.loop._conversation import check_history
from handrail.loop.agent import RunStatus
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelError, ModelRequest, ScriptedModelClient
from handrail.store import MemoryStore, Store

CHAT = "chat-1"
ADAPTERS = (
    OpenAIChatAdapter(strict=True),
    OpenAIResponsesAdapter(strict=True),
    AnthropicAdapter(strict=True),
    GeminiAdapter(),
)
ENDS = (
    "json",
    "text",
    "empty",
    "blank",
    "model_error",
    "bug",
    "steps_trip",
    "mid_turn_trip",
    "resumed",
    "cancelled",
)


def _raise_model_error(_request: ModelRequest) -> Any:
    raise ModelError("down", provider="scripted", code=ErrorCode.TRANSIENT)


def _raise_bug(_request: ModelRequest) -> Any:
    msg = "client bug"
    raise LookupError(msg)


def _read(n: int) -> Any:
    return call(f"r{n}", "asset_status", asset_id="asset-1")


def _script(end: str, n: int) -> tuple[list[Any], RunBudget | None]:
    """The replies of run `n` that ends as `end`, and its budget (None: the default)."""
    look = reply(_read(n), text="Let me look.")
    finals = {
        "json": answer("failed", "Asset-1 is down."),
        "text": reply(text="Asset-1 is down."),
        "empty": reply(text=None),
        "blank": reply(text=" \n "),
    }
    if end in finals:
        return [look, finals[end]], None
    if end == "model_error":
        return [look, _raise_model_error], None
    if end == "bug":
        return [_raise_bug], None
    if end == "steps_trip":
        return [look, reply(_read(n + 1000))], RunBudget(max_steps=1, deadline_seconds=60.0)
    if end == "mid_turn_trip":
        # Two calls of one turn fail alike: the budget trips on the turn's results.
        missing = [call(f"m{n}-{k}", "asset_status", asset_id=f"asset-9{k}") for k in (1, 2)]
        tight = RunBudget(max_steps=5, deadline_seconds=60.0, max_same_error=2)
        return [reply(*missing)], tight
    ticket = reply(call(f"t{n}", "create_ticket", **TICKET_ARGS))
    return [ticket], None


async def _one_run(made: World, end: str, n: int) -> None:
    script, budget = _script(end, n)
    loop = made.loop(ScriptedModelClient(script), budget)
    run_id = f"run-{n}"
    task = f"Task {n}: is asset-1 up?"
    if end == "bug":
        with pytest.raises(LookupError):
            await loop.run(task, ALICE, conversation_id=CHAT, run_id=run_id)
        return
    outcome = await loop.run(task, ALICE, conversation_id=CHAT, run_id=run_id)
    if end == "resumed":
        (plan_id,) = outcome.plan_ids
        token = await made.writes.issue_token(plan_id, ALICE)
        after = made.loop(ScriptedModelClient([reply(text=None)]))
        outcome = await after.resume(run_id, ALICE, plan_id=plan_id, token=token.value)
    elif end == "cancelled":
        outcome = await loop.cancel(run_id, ALICE, reason="Not now.")
    assert outcome.status is not RunStatus.SUSPENDED


def _check_sendable(turns: Sequence[Turn]) -> None:
    check_history(turns)
    for adapter in ADAPTERS:
        adapter.to_wire(turns)


async def _conversation_of(made: World, ends: Sequence[str]) -> None:
    for n, end in enumerate(ends, start=1):
        await _one_run(made, end, n)
        turns = await made.loop(ScriptedModelClient([])).conversation(CHAT, ALICE)
        _check_sendable(turns)


@pytest.mark.anyio
async def test_every_kind_of_run_end_leaves_the_conversation_sendable_in_every_store(
    store: Store, tmp_path: Path
) -> None:
    made = world(store, tmp_path / "effects.txt")
    # Each end twice: after itself, and after each other end.
    await _conversation_of(made, [*ENDS, *reversed(ENDS)])


@given(ends=st.lists(st.sampled_from(ENDS), min_size=1, max_size=6))
def test_any_sequence_of_run_ends_leaves_the_conversation_sendable(ends: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        made = world(MemoryStore(), Path(directory) / "effects.txt")
        asyncio.run(_conversation_of(made, ends))
