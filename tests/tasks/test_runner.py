"""The seam's values: a submission is immutable, JSON round-trips, and backs off as documented;
what a body raises is classified once for every runner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from handrail.errors import ErrorCode, NotFound, RateLimited, ToolRetryable
from handrail.principal import Principal
from handrail.tasks.runner import TaskSubmission, task_failure

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = Principal(user_id="alice", tenant_id="t1", roles=frozenset({"clerk"}))


def _submission(**changes: Any) -> TaskSubmission:
    values: dict[str, Any] = {
        "task_id": "task_" + "a" * 32,
        "intent_key": "hk1_x",
        "tenant_id": "t1",
        "tool": "summarise",
        "arguments": {"rows": 3, "region": "eu"},
        "principal": ALICE.snapshot(),
        "queue": "reports",
        "max_attempts": 3,
        "backoff_seconds": 1.0,
        "max_backoff_seconds": 5.0,
        "submitted_at": T0,
        "expires_at": T0 + timedelta(hours=1),
        "estimate_seconds": 30.0,
    }
    return TaskSubmission(**(values | changes))


def test_a_submission_round_trips_through_json() -> None:
    submission = _submission()
    again = TaskSubmission.from_json(submission.to_json())
    assert again == submission
    assert again.caller() == ALICE


def test_arguments_cannot_be_changed_after_submission() -> None:
    arguments = {"rows": 3}
    submission = _submission(arguments=arguments)
    arguments["rows"] = 4
    assert submission.arguments["rows"] == 3
    with pytest.raises(TypeError):
        submission.arguments["rows"] = 5  # type: ignore[index]


def test_backoff_doubles_up_to_its_cap_and_honours_retry_after() -> None:
    submission = _submission()
    assert [submission.retry_delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert submission.retry_delay(1, retry_after=9.0) == 9.0


@pytest.mark.parametrize(
    "changes",
    [
        {"max_attempts": 0},
        {"backoff_seconds": -1.0},
        {"max_backoff_seconds": 0.5},
        {"expires_at": datetime(2026, 1, 1)},  # noqa: DTZ001 - the naive time refused
    ],
)
def test_a_submission_refuses_what_no_runner_can_honour(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="task"):
        _submission(**changes)


def test_what_a_body_raises_is_classified_once_for_every_runner() -> None:
    transient = task_failure(RateLimited("slow down", retry_after=3.0))
    assert (transient.code, transient.retryable, transient.retry_after) == (
        ErrorCode.RATE_LIMITED,
        True,
        3.0,
    )
    assert task_failure(ToolRetryable("busy")).code is ErrorCode.TRANSIENT
    final = task_failure(NotFound("no such region"))
    assert (final.code, final.retryable, final.message) == (
        ErrorCode.NOT_FOUND,
        False,
        "no such region",
    )
    hidden = task_failure(KeyError("/srv/secret"))
    assert (hidden.code, hidden.retryable, hidden.message) == (
        ErrorCode.FAILED_FINAL,
        False,
        None,
    )
