"""The loop passes its exposure and its run to the gate, and checks answers by shown names.

A tool reaches a run only under a name the run's model was shown; the conversation
guard sees every call of a run under the run's id; a final answer may cite a tool by
its registry name or by the wire name the model was given, and by nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import pytest
from _agent_worker import ALICE, TICKET_ARGS, Effects, World, answer, call, reply, world
from pydantic import Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Principal,
    RiskLevel,
    SideEffect,
    Tool,
    ToolContext,
    tool,
)
from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import Decision, Outcome
from handrail.declare.exposure import ExposureRequest
from handrail.loop.agent import AgentLoop, RunStatus, read_run
from handrail.loop.answers import CheckedAnswer, EvidenceProblem, FinalState
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelClient, ScriptedModelClient
from handrail.store import Store
from handrail.testing import sequential_ids

pytestmark = pytest.mark.anyio

EMAIL_ARGS = {"customer_id": "c-1", "email": "new@example.com"}


def _update_email(effects: Effects) -> Tool:
    async def update_email(
        ctx: ToolContext,
        customer_id: Annotated[str, Field(pattern=r"^c-[0-9]+$")],
        email: Annotated[str, Field(max_length=200)],
    ) -> dict[str, object]:
        """Change a customer's e-mail address."""
        assert ctx.idempotency_key is not None
        return {"change_no": effects.commit(ctx.idempotency_key, customer_id), "email": email}

    return tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="crm",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        business_id="change_no",
    )(update_email)


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    built = world(store, tmp_path / "effects.txt")
    built.gate.registry.register(_update_email(built.effects))
    return built


def _loop(
    made: World,
    model: ModelClient,
    *,
    gate: Gate | None = None,
    exposure: ExposureRequest | None = None,
    budget: RunBudget | None = None,
) -> AgentLoop:
    return AgentLoop(
        gate=gate or made.gate,
        model=model,
        store=made.store,
        budget=budget or RunBudget(max_steps=10, deadline_seconds=60.0),
        clock=made.clock,
        checker=made.checker,
        writes=made.writes,
        new_run_id=sequential_ids("run"),
        exposure=exposure,
    )


async def _confirmed_email_change(made: World, cited: str) -> CheckedAnswer:
    """A run that proposes crm.update_email, is resumed with the token, and cites `cited`."""
    first = ScriptedModelClient([reply(call("c1", "crm.update_email", **EMAIL_ARGS))])
    outcome = await _loop(made, first).run("Change c-1's e-mail", ALICE, run_id="r1")
    assert outcome.status is RunStatus.SUSPENDED
    (plan_id,) = outcome.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient([answer("succeeded", "Changed.", tool=cited, plan_id=plan_id)])
    done = await _loop(made, finish).resume("r1", ALICE, plan_id=plan_id, token=token.value)
    assert done.status is RunStatus.FINISHED
    assert done.answer is not None
    return done.answer


@pytest.mark.parametrize("cited", ["crm.update_email", "crm__update_email"])
async def test_a_confirmed_write_cited_by_its_registry_or_wire_name_is_proven(
    made: World, cited: str
) -> None:
    checked = await _confirmed_email_change(made, cited)
    assert checked.answer.state is FinalState.SUCCEEDED
    assert checked.issues == ()
    assert len(checked.proven) == 1


@pytest.mark.parametrize(
    ("cited", "problem"),
    [
        ("create_ticket", EvidenceProblem.NOT_FOUND),  # shown, but another tool
        ("crm__create_ticket", EvidenceProblem.NOT_EXPOSED),  # no tool of that name
        ("crm.update-email", EvidenceProblem.NOT_EXPOSED),
        ("crm__update__email", EvidenceProblem.NOT_EXPOSED),
    ],
)
async def test_a_confirmed_write_cited_by_a_name_it_was_not_shown_under_proves_nothing(
    made: World, cited: str, problem: EvidenceProblem
) -> None:
    checked = await _confirmed_email_change(made, cited)
    assert checked.answer.state is FinalState.NEED_INFORMATION
    assert [issue.problem for issue in checked.issues] == [problem]


async def test_a_tool_the_run_did_not_show_is_an_unknown_tool(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "create_ticket", **TICKET_ARGS)),
            answer("need_information", "No ticket."),
        ]
    )
    reads_only = ExposureRequest(risk_ceiling=RiskLevel.L1_INTERNAL_READ)
    outcome = await _loop(made, model, exposure=reads_only).run("Open a ticket", ALICE)
    assert outcome.status is RunStatus.FINISHED
    # The model was shown only the read tool.
    (request, _) = model.requests
    assert [spec.name for spec in request.tools] == ["asset_status"]  # type: ignore[union-attr]
    record = made.store.get_run(outcome.run_id)
    assert record is not None
    (step,) = read_run(record).steps
    assert [c.code for c in step.calls] == [ErrorCode.UNKNOWN_TOOL.value]
    assert made.effects.lines() == []


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


async def test_the_guard_sees_every_call_of_a_run_under_its_run_id(made: World) -> None:
    gate = Gate(
        made.gate.registry,
        writes=made.writes,
        clock=made.clock,
        policy=_AssetPolicy(),
        guard=ConversationGuard(),
    )
    ticket = {"asset_id": "asset-2", "reason": "CONNECT_TIMEOUT since 09:30"}
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-2")),
            reply(call("c2", "create_ticket", **ticket)),
            answer("need_information", "Refused."),
        ]
    )
    outcome = await _loop(made, model, gate=gate).run("asset-2?", ALICE, run_id="guarded")
    record = made.store.get_run(outcome.run_id)
    assert record is not None
    denials = [c.code for step in read_run(record).steps for c in step.calls]
    assert denials == [ErrorCode.PERMISSION_DENIED.value, ErrorCode.PERMISSION_DENIED.value]
    # The denial is remembered under the run's id, nothing else.
    alone = await gate.handle(call("c3", "create_ticket", **ticket), ALICE, conversation="guarded")
    assert alone.error_type is ErrorCode.PERMISSION_DENIED
    fresh = await gate.handle(call("c4", "create_ticket", **ticket), ALICE, conversation="other")
    assert fresh.error_type is ErrorCode.NEEDS_CONFIRMATION


async def test_a_replay_of_a_guarded_run_meets_the_guard_as_the_run_did(made: World) -> None:
    gate = Gate(
        made.gate.registry,
        writes=made.writes,
        clock=made.clock,
        policy=_AssetPolicy(),
        guard=ConversationGuard(),
    )
    model = ScriptedModelClient(
        [
            reply(call("c1", "asset_status", asset_id="asset-2")),
            reply(call("c2", "asset_status", asset_id="asset-2")),
            reply(call("c3", "asset_status", asset_id="asset-2")),
            reply(call("c4", "asset_status", asset_id="asset-1")),
            answer("need_information", "Refused."),
        ]
    )
    patient = RunBudget(max_steps=10, deadline_seconds=60.0, max_same_error=None)
    loop = _loop(made, model, gate=gate, budget=patient)
    outcome = await loop.run("asset-2?", ALICE, run_id="guarded")
    assert outcome.status is RunStatus.FINISHED
    record = made.store.get_run("guarded")
    assert record is not None
    codes = [c.code for step in read_run(record).steps for c in step.calls]
    # Three denials trip the breaker: the fourth call, on another asset, is refused too.
    assert codes == [*[ErrorCode.PERMISSION_DENIED.value] * 3, ErrorCode.BUDGET_EXHAUSTED.value]
    # Replayed twice: each replay is a conversation of its own, as the run was.
    for _ in range(2):
        report = await loop.replay("guarded")
        assert report.matched, report.differences
