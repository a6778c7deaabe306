"""Telemetry of the agent loop: invoke_agent per entry point, chat per model turn, metrics.

The Telemetry is on SDK providers with in-memory exporters (`_flow_telemetry`); the
loop and its Writes have it, the gate has none (its spans are its own), so the spans
made inside a call here are the write path's and a read tool's own. The model is
always scripted; durations are on a FixedClock, so their values are known.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from _agent_worker import (
    ALICE,
    TICKET_ARGS,
    Effects,
    Reads,
    World,
    answer,
    build_registry,
    call,
    reply,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import Field

from _flow_telemetry import Capture, captured
from _write_tools import keyring
from handrail import Gate, RiskLevel, Writes, tool
from handrail.errors import ErrorCode
from handrail.loop.agent import AgentLoop, RunRefusedError, RunStatus
from handrail.loop.answers import EvidenceChecker
from handrail.loop.budgets import RunBudget
from handrail.loop.events import LoopEvent
from handrail.loop.models import (
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    ScriptedModelClient,
    Usage,
)
from handrail.store import MemoryStore
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio

TASK = "Is asset-1 down? Open a ticket if it is."
INVOKE = "invoke_agent"
CHAT = "chat scripted-model"


@pytest.fixture
def capture() -> Iterator[Capture]:
    with captured() as made:
        yield made


def _world(capture: Capture, effects: Effects) -> World:
    """The loop's test world, its Writes with telemetry, plus a read tool with its own span."""
    registry = build_registry(effects)
    tracer = capture.telemetry.tracer

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"assets.read"})
    def asset_owner(asset_id: Annotated[str, Field(max_length=20)]) -> dict[str, str]:
        """Who owns an asset."""
        with tracer.start_as_current_span("inside the tool"):
            return {"asset_id": asset_id, "owner": "ops"}

    registry.register(asset_owner)
    store, clock = MemoryStore(), FixedClock()
    writes = Writes(
        registry,
        store,
        keyring(),
        clock=clock,
        new_id=sequential_ids("p"),
        telemetry=capture.telemetry,
    )
    gate = Gate(registry, writes=writes, clock=clock)
    checker = EvidenceChecker(store, business_id_patterns=[r"\bTK-\d+\b"])
    return World(store, clock, effects, Reads(), gate, writes, checker)


@pytest.fixture
def world(capture: Capture, tmp_path: Path) -> World:
    return _world(capture, Effects(tmp_path / "effects.txt"))


def _loop(
    world: World, capture: Capture, model: ModelClient, budget: RunBudget | None = None
) -> AgentLoop:
    return world.loop(model, budget, telemetry=capture.telemetry)


@dataclass
class Timed:
    """A model client that takes `seconds` of the clock per turn, named as OpenAI's are."""

    inner: ScriptedModelClient
    clock: FixedClock
    seconds: float
    name: str = "openai-chat/gpt-test"

    async def complete(self, request: ModelRequest, *, timeout: float) -> ModelReply:
        self.clock.advance(self.seconds)
        return await self.inner.complete(request, timeout=timeout)


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _under(capture: Capture, span: ReadableSpan) -> list[str]:
    return sorted(child.name for child in capture.children(span))


# --- runs ---------------------------------------------------------------------------------------


async def test_a_run_is_an_invoke_agent_span_over_its_model_turns_and_its_tools_work(
    world: World, capture: Capture
) -> None:
    model = ScriptedModelClient(
        [
            reply(
                call("c1", "asset_owner", asset_id="asset-1"),
                call("c2", "note_ticket", **TICKET_ARGS),
                usage=(50, 10),
            ),
            dataclasses.replace(
                answer("need_information", "ops own it."),
                usage=Usage(input_tokens=70, output_tokens=20),
            ),
        ]
    )
    outcome = await _loop(world, capture, model).run(TASK, ALICE)
    assert outcome.status is RunStatus.FINISHED
    run = capture.one(INVOKE)
    assert run.parent is None
    assert run.status.status_code is StatusCode.UNSET
    assert _attributes(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "handrail.run.operation": "run",
        "handrail.run.id": "run-1",
        "handrail.run.status": "FINISHED",
        "gen_ai.conversation.id": "run-1",  # no stored conversation: the run is one
    }
    # The tools' own spans and the write's stage nest under the run, through the context.
    assert _under(capture, run) == [CHAT, CHAT, "handrail.execute", "inside the tool"]
    first, second = capture.named(CHAT)
    assert first.kind is SpanKind.CLIENT
    assert _attributes(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "scripted-model",
        "gen_ai.conversation.id": "run-1",
        "gen_ai.response.model": "scripted-model",
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 10,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert _attributes(second)["gen_ai.usage.input_tokens"] == 70
    usage = "gen_ai.client.token.usage"
    assert capture.observed(usage, gen_ai__token__type="input") == (2, 120)  # noqa: S106 - a label
    assert capture.observed(usage, gen_ai__token__type="output") == (2, 30)  # noqa: S106 - a label


async def test_a_model_turn_records_its_duration_on_the_clock_and_its_provider(
    world: World, capture: Capture
) -> None:
    inner = ScriptedModelClient(
        [reply(call("c1", "asset_owner", asset_id="asset-1")), answer("succeeded", "ok")]
    )
    outcome = await _loop(world, capture, Timed(inner, world.clock, 1.5)).run(TASK, ALICE)
    assert outcome.status is RunStatus.FINISHED
    chats = capture.named("chat gpt-test")
    assert len(chats) == 2
    assert _attributes(chats[0])["gen_ai.provider.name"] == "openai"
    assert _attributes(chats[0])["gen_ai.request.model"] == "gpt-test"
    duration = "gen_ai.client.operation.duration"
    assert capture.observed(duration, gen_ai__request__model="gpt-test") == (2, 3.0)


async def test_a_suspended_run_and_its_resume_are_two_invoke_agent_spans(
    world: World, capture: Capture
) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "create_ticket", **TICKET_ARGS)), answer("succeeded", "Opened.")]
    )
    loop = _loop(world, capture, model)
    suspended = await loop.run(TASK, ALICE)
    assert suspended.status is RunStatus.SUSPENDED
    (plan_id,) = suspended.plan_ids
    token = await world.writes.issue_token(plan_id, ALICE)
    resumed = await loop.resume(suspended.run_id, ALICE, plan_id=plan_id, token=token.value)
    assert resumed.status is RunStatus.FINISHED
    run, resume = capture.named(INVOKE)
    assert _attributes(run)["handrail.run.status"] == "SUSPENDED"
    assert _under(capture, run) == [CHAT, "handrail.plan"]
    assert _attributes(resume)["handrail.run.operation"] == "resume"
    assert _attributes(resume)["handrail.run.id"] == suspended.run_id
    # The person's confirmation and the plan's execution are the resume's work.
    assert _under(capture, resume) == [CHAT, "execute_tool create_ticket", "handrail.confirm"]


async def test_a_budget_stop_is_counted_by_its_reason_and_is_no_error(
    world: World, capture: Capture
) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_owner", asset_id="asset-1")),
            reply(call("c2", "asset_owner", asset_id="asset-2")),
        ]
    )
    outcome = await _loop(world, capture, model, RunBudget(max_steps=1, deadline_seconds=60.0)).run(
        TASK, ALICE
    )
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    run = capture.one(INVOKE)
    assert run.status.status_code is StatusCode.UNSET
    assert _attributes(run)["handrail.budget.reason"] == "steps"
    assert capture.total("handrail.budget.stops", handrail__budget__reason="steps") == 1
    # A replay of it stops the same way; nothing stopped, nothing is counted.
    report = await _loop(world, capture, model).replay(outcome.run_id)
    assert report.matched
    replay = capture.named(INVOKE)[-1]
    assert _attributes(replay)["handrail.run.operation"] == "replay"
    assert _under(capture, replay) == [CHAT, "inside the tool"]
    assert capture.total("handrail.budget.stops") == 1


async def test_a_model_error_fails_the_chat_and_the_run_span_with_its_code(
    world: World, capture: Capture
) -> None:
    def refuse(_request: ModelRequest) -> Any:
        raise ModelError("late", provider="scripted", code=ErrorCode.TIMEOUT)

    outcome = await _loop(world, capture, ScriptedModelClient([refuse])).run(TASK, ALICE)
    assert (outcome.status, outcome.error) == (RunStatus.FAILED, "TIMEOUT")
    for span in (capture.one(CHAT), capture.one(INVOKE)):
        assert span.status.status_code is StatusCode.ERROR
        assert _attributes(span)["error.type"] == "TIMEOUT"
    duration = "gen_ai.client.operation.duration"
    assert capture.observed(duration, error__type="TIMEOUT")[0] == 1
    assert capture.points("gen_ai.client.token.usage") == []


async def test_a_refused_request_about_a_run_sets_its_code_and_is_no_error(
    world: World, capture: Capture
) -> None:
    loop = _loop(world, capture, ScriptedModelClient([]))
    with pytest.raises(RunRefusedError):
        await loop.resume("run-404", ALICE, plan_id="p-1", token=None)
    with pytest.raises(RunRefusedError):
        await loop.take_over("run-405")
    resume, take_over = capture.named(INVOKE)
    for span, operation, run_id in (
        (resume, "resume", "run-404"),
        (take_over, "take_over", "run-405"),
    ):
        assert span.status.status_code is StatusCode.UNSET
        assert _attributes(span)["handrail.error.code"] == "NOT_FOUND"
        assert _attributes(span)["handrail.run.operation"] == operation
        assert _attributes(span)["handrail.run.id"] == run_id


async def _all(events: AsyncIterator[LoopEvent]) -> list[LoopEvent]:
    return [event async for event in events]


async def test_a_streamed_run_has_its_model_turns_under_its_invoke_agent_span(
    world: World, capture: Capture
) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_owner", asset_id="asset-1"), text="Checking."),
            answer("succeeded", "ok"),
        ],
        delta_chars=4,
    )
    events = await _all(_loop(world, capture, model).stream(TASK, ALICE, run_id="r1"))
    assert type(events[-1]).__name__ == "RunFinished"
    run = capture.one(INVOKE)
    assert _attributes(run)["handrail.run.id"] == "r1"
    assert _under(capture, run) == [CHAT, CHAT, "inside the tool"]


# --- no telemetry -------------------------------------------------------------------------------

_WITHOUT = """
import asyncio, json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/loop"]
from _agent_worker import ALICE, TICKET_ARGS, answer, call, reply, world
from handrail.loop.models import ScriptedModelClient
from handrail.store import MemoryStore

async def main():
    made = world(MemoryStore(), Path(sys.argv[2]))
    turns = [reply(call("c1", "create_ticket", **TICKET_ARGS)), answer("succeeded", "ok")]
    model = ScriptedModelClient(turns)
    loop = made.loop(model)
    first = await loop.run("Open a ticket.", ALICE)
    token = await made.writes.issue_token(first.plan_ids[0], ALICE)
    then = await loop.resume(first.run_id, ALICE, plan_id=first.plan_ids[0], token=token.value)
    return [first.status.value, then.status.value]

done = asyncio.run(main())
print(json.dumps([done, sorted(m for m in sys.modules if m.startswith("opentelemetry"))]))
"""


def test_without_telemetry_a_run_and_its_resume_load_no_opentelemetry(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", _WITHOUT, str(tests), str(tmp_path / "effects.txt")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    ran, loaded = json.loads(done.stdout.splitlines()[-1])
    assert ran == ["SUSPENDED", "FINISHED"]
    assert loaded == []
