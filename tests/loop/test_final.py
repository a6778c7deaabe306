"""Every finished run answers in one shape, `RunAnswer`, whatever form the model chose.

A JSON answer gives its message, the state it may keep after the evidence check, the
state it claimed, the check's verdict and notice and the keys that proved it; free
text gives its text, no state, and a verdict and notice of Handrail's own words. The
older fields (`answer`, `text`, `text_check`) stay as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from handrail.loop.agent import RunAnswer, RunStatus
from handrail.loop.answers import FinalState, TextCheck
from handrail.loop.budgets import RunBudget
from handrail.loop.final import parse_final_answer
from handrail.loop.models import ScriptedModelClient
from handrail.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def made(store: Store, tmp_path: Path) -> World:
    return world(store, tmp_path / "effects.txt")


async def test_a_json_answer_gives_its_message_and_kept_state(made: World) -> None:
    model = ScriptedModelClient([answer("need_information", "Which asset do you mean?")])
    outcome = await made.loop(model).run("Help", ALICE)
    assert outcome.final == RunAnswer(
        message="Which asset do you mean?",
        structured=True,
        state=FinalState.NEED_INFORMATION,
        claimed=FinalState.NEED_INFORMATION,
        verified=True,
        notice=None,
        proven=(),
    )
    assert outcome.answer is not None
    assert outcome.final.message == outcome.answer.answer.message


async def test_a_false_success_gives_the_downgraded_state_and_a_notice(made: World) -> None:
    model = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", business_id="TK-9")]
    )
    outcome = await made.loop(model).run("Open a ticket", ALICE)
    final = outcome.final
    assert final is not None
    assert final.structured
    assert (final.state, final.claimed) == (FinalState.NEED_INFORMATION, FinalState.SUCCEEDED)
    assert not final.verified
    assert outcome.answer is not None
    assert final.notice == outcome.answer.notice
    assert final.notice is not None
    assert final.proven == ()


async def test_a_proven_success_names_the_keys_that_prove_it(made: World) -> None:
    model = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    suspended = await made.loop(model).run("Open a ticket", ALICE)
    (plan_id,) = suspended.plan_ids
    assert suspended.final is None
    token = await made.writes.issue_token(plan_id, ALICE)
    finish = ScriptedModelClient(
        [answer("succeeded", "Ticket opened.", tool="create_ticket", plan_id=plan_id)]
    )
    done = await made.loop(finish).resume(
        suspended.run_id, ALICE, plan_id=plan_id, token=token.value
    )
    final = done.final
    assert final is not None
    assert (final.state, final.verified, final.notice) == (FinalState.SUCCEEDED, True, None)
    assert done.answer is not None
    assert final.proven == done.answer.proven
    assert len(final.proven) == 1


async def test_free_text_gives_its_text_no_state_and_a_verdict(made: World) -> None:
    model = ScriptedModelClient([reply(text="asset-1 is down.")])
    outcome = await made.loop(model).run("Status?", ALICE)
    assert outcome.final == RunAnswer(
        message="asset-1 is down.",
        structured=False,
        state=None,
        claimed=None,
        verified=True,
        notice=None,
        proven=(),
    )
    assert outcome.text == "asset-1 is down."


async def test_free_text_claiming_an_unproven_effect_gets_handrails_notice(made: World) -> None:
    model = ScriptedModelClient([reply(text="Done, ticket TK-0042 was created.")])
    outcome = await made.loop(model).run("Open a ticket", ALICE)
    final = outcome.final
    assert final is not None
    assert not final.verified
    assert final.notice is not None
    assert "TK-0042" not in final.notice
    assert final.message == "Done, ticket TK-0042 was created."
    assert outcome.text_check is not None
    assert not outcome.text_check.ok


async def test_only_finished_runs_have_a_final_answer(made: World) -> None:
    looping = ScriptedModelClient(
        [reply(call(f"c{n}", "asset_status", asset_id="asset-1")) for n in range(20)]
    )
    outcome = await made.loop(looping, RunBudget(max_steps=1, deadline_seconds=60.0)).run(
        "Poll", ALICE
    )
    assert outcome.status is RunStatus.BUDGET_EXHAUSTED
    assert outcome.final is None


@pytest.mark.parametrize(
    ("check", "notice"),
    [
        (TextCheck(complete=False), "too long"),
        (TextCheck(unsupported_success=True, success_words=("done",)), "claims success"),
    ],
)
def test_a_text_verdict_that_fails_has_a_notice_saying_why(check: TextCheck, notice: str) -> None:
    final = RunAnswer.of_text("text", check)
    assert not final.verified
    assert final.notice is not None
    assert notice in final.notice


@pytest.mark.parametrize(
    ("text", "structured"),
    [
        ('{"state": "failed", "message": "No."}', True),
        ('```json\n{"state": "failed", "message": "No."}\n```', True),
        ('{"state": "exploded", "message": "No."}', False),
        ("No.", False),
        ("", False),
    ],
)
def test_a_final_reply_is_json_only_when_it_is_a_whole_final_answer(
    text: str, structured: bool
) -> None:
    assert (parse_final_answer(text) is not None) is structured
