"""`handrail tasks list|show|cancel`: one tenant's tasks, another's are "not found"."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from handrail import cli
from handrail.store import SqliteStore
from handrail.tasking import TaskRecord, TaskState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _task(n: int, **changes: object) -> TaskRecord:
    base = TaskRecord(
        task_id=f"task_{n:032x}",
        tenant_id="t1",
        user_id="alice",
        tool="reports.export_orders",
        intent_key=f"hk1_{n}",
        principal='{"tenant_id": "t1", "user_id": "alice"}',
        arguments="{}",
        queue="reports",
        state=TaskState.QUEUED,
        created_at=T0 + timedelta(seconds=n),
        expires_at=datetime.now(UTC) + timedelta(days=1),
        max_attempts=3,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    path = tmp_path / "h.db"
    store = SqliteStore.open(path)
    try:
        store.insert_task(_task(1))
        store.insert_task(_task(2, state=TaskState.RUNNING, progress_message="half \u2713 done"))
        store.insert_task(_task(3, tenant_id="t2"))
        store.insert_task(_task(4, state=TaskState.SUCCEEDED, result='{"rows": 3}'))
        store.insert_task(_task(5, state=TaskState.SUCCEEDED, result_ref="raw_big", tenant_id="t3"))
    finally:
        store.close()
    return str(path)


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["tasks", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_shows_one_tenants_tasks_newest_first(store_path: str) -> None:
    code, out = _run("list", "--store", store_path, "--tenant", "t1")
    assert code == 0
    ids = [word for word in out.split() if word.startswith("task_")]
    assert ids == [f"task_{n:032x}" for n in (4, 2, 1)]
    code, out = _run("list", "--store", store_path, "--tenant", "t1", "--state", "running")
    assert f"task_{2:032x}" in out
    assert f"task_{1:032x}" not in out
    assert _run("list", "--store", store_path, "--tenant", "t9")[1].startswith("no tasks")
    assert _run("list", "--store", store_path, "--tenant", "t1", "--state", "x")[0] != 0


def test_show_prints_the_task_as_ascii_json(store_path: str) -> None:
    code, out = _run("show", f"task_{2:032x}", "--store", store_path, "--tenant", "t1")
    assert code == 0
    view = json.loads(out)
    assert view["state"] == "running"
    assert view["message"] == "half \u2713 done"
    assert "\u2713" not in out
    done = json.loads(_run("show", f"task_{4:032x}", "--store", store_path, "--tenant", "t1")[1])
    assert done["result"] == {"rows": 3}
    big = json.loads(_run("show", f"task_{5:032x}", "--store", store_path, "--tenant", "t3")[1])
    assert big["result_ref"] == "raw_big"


def test_another_tenants_task_is_not_found_like_a_missing_one(store_path: str) -> None:
    theirs = _run("show", f"task_{3:032x}", "--store", store_path, "--tenant", "t1")
    missing = _run("show", f"task_{9:032x}", "--store", store_path, "--tenant", "t1")
    assert theirs[0] == missing[0] != 0
    assert theirs[1].replace("3", "9") == missing[1]
    cancel = _run("cancel", f"task_{3:032x}", "--store", store_path, "--tenant", "t1", "--by", "x")
    assert cancel[0] != 0
    assert "no task" in cancel[1]


def test_cancel_stops_a_queued_task_marks_a_running_one_and_refuses_a_finished_one(
    store_path: str,
) -> None:
    args = ("--store", store_path, "--tenant", "t1", "--by", "ops")
    assert _run("cancel", f"task_{1:032x}", *args) == (0, f"cancelled task task_{1:032x}\n")
    code, out = _run("cancel", f"task_{2:032x}", *args)
    assert (code, "next step" in out) == (0, True)
    code, out = _run("cancel", f"task_{4:032x}", *args)
    assert code != 0
    assert "already finished" in out
    store = SqliteStore.open(store_path)
    try:
        assert store.get_task(f"task_{1:032x}").state is TaskState.CANCELLED  # type: ignore[union-attr]
        assert store.get_task(f"task_{2:032x}").cancel_requested  # type: ignore[union-attr]
    finally:
        store.close()
    assert (
        _run("cancel", f"task_{1:032x}", "--store", store_path, "--tenant", "t1", "--by", "")[0]
        != 0
    )
