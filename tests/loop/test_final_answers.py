"""Final answers: `succeeded` only with a SUCCEEDED record of the matching tool and tenant."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _records import execution_record
from handrail import ExecutionStatus, Principal, RiskLevel, SideEffect, Store, ToolSpec
from handrail.errors import ConfigurationError
from handrail.execution import plan_key
from handrail.loop.answers import (
    CheckedAnswer,
    Evidence,
    EvidenceChecker,
    EvidenceIssue,
    EvidenceProblem,
    FinalAnswer,
    FinalState,
    ReferenceKind,
    tool_names_of,
)
from handrail.store import MemoryStore

ALICE = Principal(user_id="alice", tenant_id="t1")
MALLORY = Principal(user_id="mallory", tenant_id="t2")
KEY_OK = "hk1_" + "a" * 64
KEY_UNKNOWN = "hk1_" + "b" * 64
KEY_FAILED = "hk1_" + "c" * 64
KEY_OTHER_TENANT = "hk1_" + "d" * 64
KEY_RUNNING = "hk1_" + "e" * 64
KEY_PREPARED = "hk1_" + "f" * 64
KEY_MISSING = "hk1_" + "0" * 64
PLAN_KEY = plan_key(tenant_id="t1", tool="create_ticket", plan_id="plan-7")


def _seed(store: Store) -> None:
    rows: list[dict[str, Any]] = [
        {"idempotency_key": KEY_OK, "status": ExecutionStatus.SUCCEEDED, "business_id": "TK-1"},
        {"idempotency_key": KEY_UNKNOWN, "status": ExecutionStatus.UNKNOWN},
        {
            "idempotency_key": KEY_FAILED,
            "status": ExecutionStatus.FAILED_FINAL,
            "error_code": "FAILED_FINAL",
        },
        {
            "idempotency_key": KEY_OTHER_TENANT,
            "status": ExecutionStatus.SUCCEEDED,
            "tenant_id": "t2",
            "business_id": "TK-2",
        },
        {"idempotency_key": KEY_RUNNING, "status": ExecutionStatus.RUNNING},
        {"idempotency_key": KEY_PREPARED, "status": ExecutionStatus.PREPARED},
        {
            "idempotency_key": PLAN_KEY,
            "status": ExecutionStatus.SUCCEEDED,
            "plan_id": "plan-7",
            "business_id": "TK-7",
        },
        {
            "idempotency_key": "hk1_" + "9" * 64,
            "status": ExecutionStatus.SUCCEEDED,
            "tool": "send_mail",
            "business_id": "MAIL-1",
        },
    ]
    for row in rows:
        row.setdefault("tool", "create_ticket")
        if row["status"] is not ExecutionStatus.RUNNING:
            row.update(lease_owner=None, lease_expires_at=None)
        assert store.insert_execution(execution_record(**row))


@pytest.fixture
def checker(store: Store) -> EvidenceChecker:
    _seed(store)
    return EvidenceChecker(store, business_id_patterns=[r"\bTK-\d+\b", r"\bMAIL-\d+\b"])


def _succeeded(*evidence: Evidence, message: str = "Done: ticket created.") -> FinalAnswer:
    return FinalAnswer(state=FinalState.SUCCEEDED, message=message, evidence=evidence)


def _issue(checked: CheckedAnswer) -> EvidenceIssue:
    assert len(checked.issues) == 1
    return checked.issues[0]


# --- structured answers ------------------------------------------------------------------------


@pytest.mark.invariant(10)
def test_a_succeeded_claim_proven_by_its_key_is_accepted(checker: EvidenceChecker) -> None:
    answer = _succeeded(Evidence(tool="create_ticket", key=KEY_OK))
    checked = checker.check_sync(answer, ALICE)
    assert checked.answer == answer
    assert not checked.downgraded
    assert checked.issues == ()
    assert checked.proven == (KEY_OK,)
    assert checked.notice is None


def test_a_succeeded_claim_proven_by_business_id_or_plan_id_is_accepted(
    checker: EvidenceChecker,
) -> None:
    answer = _succeeded(
        Evidence(tool="create_ticket", business_id="TK-1"),
        Evidence(tool="create_ticket", plan_id="plan-7"),
        Evidence(tool="create_ticket", plan_id="plan-7", business_id="TK-7", key=PLAN_KEY),
    )
    checked = checker.check_sync(answer, ALICE)
    assert checked.answer.state is FinalState.SUCCEEDED
    assert checked.proven == (KEY_OK, PLAN_KEY, PLAN_KEY)


@pytest.mark.invariant(10)
def test_a_false_succeeded_claim_is_downgraded_with_the_reason(checker: EvidenceChecker) -> None:
    answer = _succeeded(Evidence(tool="create_ticket", key=KEY_MISSING))
    checked = checker.check_sync(answer, ALICE)
    assert checked.downgraded
    assert checked.claimed is FinalState.SUCCEEDED
    assert checked.answer.state is FinalState.NEED_INFORMATION
    assert checked.answer.message == answer.message
    assert checked.notice is not None
    assert _issue(checked) == EvidenceIssue(
        index=0, tool="create_ticket", problem=EvidenceProblem.NOT_FOUND
    )


def test_a_succeeded_claim_without_evidence_is_downgraded(checker: EvidenceChecker) -> None:
    checked = checker.check_sync(_succeeded(), ALICE)
    assert checked.answer.state is FinalState.NEED_INFORMATION
    assert _issue(checked).problem is EvidenceProblem.NO_EVIDENCE


def test_a_record_of_another_tool_proves_nothing(checker: EvidenceChecker) -> None:
    by_key = checker.check_sync(_succeeded(Evidence(tool="refund", key=KEY_OK)), ALICE)
    assert by_key.answer.state is FinalState.NEED_INFORMATION
    assert _issue(by_key).problem is EvidenceProblem.WRONG_TOOL
    by_id = checker.check_sync(_succeeded(Evidence(tool="refund", business_id="TK-1")), ALICE)
    assert _issue(by_id).problem is EvidenceProblem.WRONG_TOOL
    # A plan's key includes its tool: another tool's plan is simply not there.
    by_plan = checker.check_sync(_succeeded(Evidence(tool="refund", plan_id="plan-7")), ALICE)
    assert _issue(by_plan).problem is EvidenceProblem.NOT_FOUND


@pytest.mark.invariant(10)
def test_a_record_of_another_tenant_never_counts(checker: EvidenceChecker) -> None:
    for evidence in (
        Evidence(tool="create_ticket", key=KEY_OTHER_TENANT),
        Evidence(tool="create_ticket", business_id="TK-2"),
    ):
        checked = checker.check_sync(_succeeded(evidence), ALICE)
        assert checked.answer.state is FinalState.NEED_INFORMATION
        # Reported exactly as a missing record: nothing about the other tenant leaks.
        assert _issue(checked) == EvidenceIssue(
            index=0, tool="create_ticket", problem=EvidenceProblem.NOT_FOUND
        )
    # The owner's own claim is accepted.
    mine = _succeeded(Evidence(tool="create_ticket", key=KEY_OTHER_TENANT))
    assert not checker.check_sync(mine, MALLORY).downgraded


@pytest.mark.parametrize("key", [KEY_UNKNOWN, KEY_RUNNING, KEY_PREPARED])
def test_a_claim_on_an_unsettled_record_becomes_processing(
    checker: EvidenceChecker, key: str
) -> None:
    checked = checker.check_sync(_succeeded(Evidence(tool="create_ticket", key=key)), ALICE)
    assert checked.answer.state is FinalState.PROCESSING
    issue = _issue(checked)
    assert issue.problem is EvidenceProblem.IN_PROGRESS
    assert issue.status is not None
    assert not issue.status.settled


def test_a_claim_on_a_failed_record_becomes_failed(checker: EvidenceChecker) -> None:
    checked = checker.check_sync(_succeeded(Evidence(tool="create_ticket", key=KEY_FAILED)), ALICE)
    assert checked.answer.state is FinalState.FAILED
    assert _issue(checked) == EvidenceIssue(
        index=0,
        tool="create_ticket",
        problem=EvidenceProblem.FAILED,
        status=ExecutionStatus.FAILED_FINAL,
    )


def test_one_unproven_item_downgrades_the_whole_answer_and_unsettled_wins(
    checker: EvidenceChecker,
) -> None:
    answer = _succeeded(
        Evidence(tool="create_ticket", key=KEY_OK),
        Evidence(tool="create_ticket", key=KEY_FAILED),
        Evidence(tool="create_ticket", key=KEY_UNKNOWN),
        Evidence(tool="create_ticket", key=KEY_MISSING),
    )
    checked = checker.check_sync(answer, ALICE)
    # Something may still happen: "failed" would invite a retry of an unknown write.
    assert checked.answer.state is FinalState.PROCESSING
    assert [i.index for i in checked.issues] == [1, 2, 3]
    assert checked.proven == (KEY_OK,)


def test_failed_wins_over_missing_records(checker: EvidenceChecker) -> None:
    answer = _succeeded(
        Evidence(tool="create_ticket", key=KEY_MISSING),
        Evidence(tool="create_ticket", key=KEY_FAILED),
    )
    assert checker.check_sync(answer, ALICE).answer.state is FinalState.FAILED


def test_ids_that_point_at_different_executions_are_a_mismatch(checker: EvidenceChecker) -> None:
    for evidence in (
        Evidence(tool="create_ticket", key=KEY_OK, business_id="TK-7"),
        Evidence(tool="create_ticket", key=KEY_OK, plan_id="plan-7"),
    ):
        checked = checker.check_sync(_succeeded(evidence), ALICE)
        assert _issue(checked).problem is EvidenceProblem.MISMATCH


def test_with_run_calls_only_records_of_this_run_prove_a_claim(checker: EvidenceChecker) -> None:
    answer = _succeeded(Evidence(tool="create_ticket", business_id="TK-1"))
    accepted = checker.check_sync(answer, ALICE, run_calls={KEY_OK})
    assert not accepted.downgraded
    refused = checker.check_sync(answer, ALICE, run_calls={PLAN_KEY})
    assert refused.answer.state is FinalState.NEED_INFORMATION
    assert _issue(refused).problem is EvidenceProblem.NOT_IN_RUN


@pytest.mark.parametrize(
    "state",
    [s for s in FinalState if s is not FinalState.SUCCEEDED],
)
def test_answers_that_claim_no_effect_pass_unchanged(
    checker: EvidenceChecker, state: FinalState
) -> None:
    answer = FinalAnswer(
        state=state,
        message="Waiting.",
        evidence=(Evidence(tool="x", key=KEY_MISSING),),
    )
    checked = checker.check_sync(answer, ALICE)
    assert checked.answer is answer
    assert not checked.downgraded


def test_business_ids_older_than_the_scan_window_are_not_found(store: Store) -> None:
    _seed(store)
    newest = store.list_executions(tenant_id="t1", limit=1)[0]
    assert newest.business_id != "TK-1"
    answer = _succeeded(Evidence(tool="create_ticket", business_id="TK-1"))
    assert not EvidenceChecker(store, scan_limit=8).check_sync(answer, ALICE).downgraded
    # Only the most recently updated record is scanned: TK-1 is out of sight.
    checked = EvidenceChecker(store, scan_limit=1).check_sync(answer, ALICE)
    assert checked.answer.state is FinalState.NEED_INFORMATION
    assert _issue(checked).problem is EvidenceProblem.NOT_FOUND


@pytest.mark.anyio
async def test_the_async_check_gives_the_same_verdict(checker: EvidenceChecker) -> None:
    answer = _succeeded(Evidence(tool="create_ticket", key=KEY_FAILED))
    assert await checker.check(answer, ALICE) == checker.check_sync(answer, ALICE)
    text = f"Created {KEY_OK}."
    assert await checker.check_text(text, ALICE) == checker.check_text_sync(text, ALICE)


# --- the answer schema --------------------------------------------------------------------------


def test_the_answer_schema_names_every_state_and_forbids_extra_fields() -> None:
    schema = FinalAnswer.model_json_schema()
    assert schema["additionalProperties"] is False
    states = schema["$defs"]["FinalState"]["enum"]
    assert states == [
        "need_information",
        "awaiting_confirmation",
        "processing",
        "succeeded",
        "failed",
    ]
    assert set(schema["required"]) == {"state", "message"}


@pytest.mark.parametrize(
    "payload",
    [
        {"state": "done", "message": "x"},
        {"state": "succeeded", "message": "x", "verified": True},
        {"state": "succeeded", "message": "x", "evidence": [{"tool": "t"}]},
        {"state": "succeeded", "message": "x", "evidence": [{"tool": "", "key": "k"}]},
        {"state": "succeeded", "message": "x", "evidence": [{"tool": "t", "key": "k" * 201}]},
        {"state": "succeeded", "message": "x", "command_ids": ["c"] * 51},
        {"state": "succeeded", "message": "x" * 20_001},
        {"state": "succeeded", "message": "x", "evidence": [{"tool": "t", "key": "k"}] * 51},
    ],
)
def test_a_malformed_answer_is_refused(payload: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        FinalAnswer.model_validate(payload)


def test_an_answer_parses_from_model_json() -> None:
    answer = FinalAnswer.model_validate_json(
        '{"state": "succeeded", "message": "ok", "command_ids": ["cmd-1"],'
        ' "evidence": [{"tool": "create_ticket", "business_id": "TK-1"}]}',
    )
    assert answer.evidence == (Evidence(tool="create_ticket", business_id="TK-1"),)
    assert answer.command_ids == ("cmd-1",)


# --- free text ---------------------------------------------------------------------------------


def test_free_text_with_a_proven_reference_is_ok(checker: EvidenceChecker) -> None:
    check = checker.check_text_sync("Done. Your ticket TK-1 was created.", ALICE)
    assert check.ok
    assert [(r.text, r.kind, r.proven) for r in check.references] == [
        ("TK-1", ReferenceKind.BUSINESS_ID, True),
    ]
    assert check.success_words == ("done", "created")


def test_free_text_reports_unproven_references(checker: EvidenceChecker) -> None:
    text = f"Created {KEY_OK} and {KEY_UNKNOWN}; also TK-2, TK-99 and {KEY_FAILED}."
    check = checker.check_text_sync(text, ALICE)
    assert not check.ok
    assert not check.unsupported_success  # one reference is proven
    unproven = {r.text: (r.problem, r.status) for r in check.unproven}
    assert unproven == {
        KEY_UNKNOWN: (EvidenceProblem.IN_PROGRESS, ExecutionStatus.UNKNOWN),
        KEY_FAILED: (EvidenceProblem.FAILED, ExecutionStatus.FAILED_FINAL),
        "TK-2": (EvidenceProblem.NOT_FOUND, None),  # another tenant's
        "TK-99": (EvidenceProblem.NOT_FOUND, None),
    }


@pytest.mark.parametrize(
    "text",
    [
        "All done!",
        "The ticket was CREATED.",
        "The refund succeeded.",
        "退款已完成。",
        "工单创建成功",
        "\uff24\uff4f\uff4e\uff45",  # full-width "Done"
        "do\u200bne",  # zero-width space inside
        f"Created, see {KEY_MISSING}.",
        "Ticket TK-99 created.",
    ],
)
def test_success_words_without_proof_are_flagged(checker: EvidenceChecker, text: str) -> None:
    check = checker.check_text_sync(text, ALICE)
    assert check.unsupported_success
    assert not check.ok


@pytest.mark.parametrize(
    "text",
    [
        "I need the order number before I can open a ticket.",
        "The abandoned cart was recreated? No: nothing has been changed.",
        "",
    ],
)
def test_text_without_claims_is_ok(checker: EvidenceChecker, text: str) -> None:
    check = checker.check_text_sync(text, ALICE)
    assert check.ok
    assert check.success_words == ()


def test_a_reference_that_is_only_part_of_a_longer_token_is_not_a_key(
    checker: EvidenceChecker,
) -> None:
    check = checker.check_text_sync(f"x{KEY_OK}0", ALICE)
    assert check.references == ()


def test_full_width_business_ids_are_read_as_what_they_show(checker: EvidenceChecker) -> None:
    full_width = "\uff34\uff2b\uff0d\uff11"  # "TK-1"
    check = checker.check_text_sync(f"Ticket {full_width} is done.", ALICE)
    assert check.ok
    assert check.references[0].text == "TK-1"


def test_references_beyond_the_limit_are_not_looked_up(store: Store) -> None:
    _seed(store)
    small = EvidenceChecker(store, business_id_patterns=[r"TK-\d+"], max_references=2)
    check = small.check_text_sync("TK-1 TK-7 TK-1 TK-3", ALICE)
    assert [(r.text, r.problem) for r in check.references] == [
        ("TK-1", None),
        ("TK-7", None),
        ("TK-3", EvidenceProblem.NOT_CHECKED),
    ]
    assert not check.ok


def test_text_longer_than_the_scan_limit_is_never_ok(store: Store) -> None:
    _seed(store)
    small = EvidenceChecker(store, business_id_patterns=[r"TK-\d+"], max_text_chars=20)
    check = small.check_text_sync("Ticket TK-1 is done." + " " * 10 + "TK-99 done", ALICE)
    assert not check.complete
    assert [r.text for r in check.references] == ["TK-1"]
    assert not check.ok


def test_empty_pattern_matches_are_ignored() -> None:
    checker = EvidenceChecker(MemoryStore(), business_id_patterns=[r"(?:TK-\d+)?"])
    assert checker.check_text_sync("no ids here", ALICE).references == ()


@pytest.mark.parametrize(
    "options",
    [
        {"scan_limit": 0},
        {"max_references": True},
        {"max_text_chars": -5},
        {"success_words": []},
        {"success_words": [""]},
    ],
)
def test_a_bad_checker_configuration_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        EvidenceChecker(MemoryStore(), **options)


@given(text=st.text(max_size=300))
def test_free_text_never_proves_anything_on_an_empty_store(text: str) -> None:
    checker = EvidenceChecker(MemoryStore(), business_id_patterns=[r"TK-\d+"])
    check = checker.check_text_sync(text, ALICE)
    assert not any(r.proven for r in check.references)
    assert check.unsupported_success == bool(check.success_words)
    assert check.ok == (not check.references and not check.success_words)


# --- the names a run showed its model ---------------------------------------------------------


def _spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description="A tool.",
        input_schema={"type": "object"},
        schema_version="1",
        description_version="1",
        risk=RiskLevel.L1_INTERNAL_READ,
        side_effect=SideEffect.NONE,
    )


SHOWN = tool_names_of([_spec("crm.update_email"), _spec("create_ticket"), _spec("send_mail")])


@pytest.mark.parametrize("cited", ["create_ticket", "crm__update_email", "crm.update_email"])
def test_with_tool_names_a_claim_may_cite_any_name_its_tool_was_shown_under(
    store: Store, cited: str
) -> None:
    key = plan_key(tenant_id="t1", tool="crm.update_email", plan_id="plan-9")
    row = {"idempotency_key": key, "status": ExecutionStatus.SUCCEEDED, "plan_id": "plan-9"}
    assert store.insert_execution(
        execution_record(**row, tool="crm.update_email", lease_owner=None, lease_expires_at=None)
    )
    _seed(store)
    checker = EvidenceChecker(store)
    plan = "plan-9" if "update" in cited else "plan-7"
    answer = _succeeded(Evidence(tool=cited, plan_id=plan))
    checked = checker.check_sync(answer, ALICE, tool_names=SHOWN)
    assert (checked.answer.state, checked.issues) == (FinalState.SUCCEEDED, ())


@pytest.mark.parametrize(
    ("cited", "problem"),
    [
        ("create__ticket", EvidenceProblem.NOT_EXPOSED),
        ("other.tool", EvidenceProblem.NOT_EXPOSED),
        ("send_mail", EvidenceProblem.NOT_FOUND),  # shown, but the plan is another tool's
    ],
)
def test_with_tool_names_a_name_the_tool_was_not_shown_under_proves_nothing(
    checker: EvidenceChecker, cited: str, problem: EvidenceProblem
) -> None:
    answer = _succeeded(Evidence(tool=cited, plan_id="plan-7"))
    checked = checker.check_sync(answer, ALICE, tool_names=SHOWN)
    assert checked.answer.state is FinalState.NEED_INFORMATION
    assert [issue.problem for issue in checked.issues] == [problem]


def test_with_tool_names_a_business_id_of_another_shown_tool_is_the_wrong_tool(
    checker: EvidenceChecker,
) -> None:
    answer = _succeeded(Evidence(tool="send_mail", business_id="TK-1"))
    checked = checker.check_sync(answer, ALICE, tool_names=SHOWN)
    assert [issue.problem for issue in checked.issues] == [EvidenceProblem.WRONG_TOOL]


def test_without_tool_names_only_the_registry_name_proves(checker: EvidenceChecker) -> None:
    answer = _succeeded(Evidence(tool="create__ticket", plan_id="plan-7"))
    assert checker.check_sync(answer, ALICE).answer.state is FinalState.NEED_INFORMATION


def test_tool_names_map_registry_and_wire_names_and_drop_ambiguous_ones() -> None:
    assert SHOWN == {
        "crm.update_email": "crm.update_email",
        "crm__update_email": "crm.update_email",
        "create_ticket": "create_ticket",
        "send_mail": "send_mail",
    }
    # `a__b` is both a registry name and the wire name of `a.b`: it stands for neither.
    assert tool_names_of([_spec("a.b"), _spec("a__b")]) == {"a.b": "a.b"}
    # A name that cannot go out on the wire is known by its registry name alone.
    assert tool_names_of([_spec("x.y_")]) == {"x.y_": "x.y_"}
