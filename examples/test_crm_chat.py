"""The newcomer's path, end to end: the CRM chat program as separate processes.

A scripted OpenAI-compatible server on 127.0.0.1 (no model, no provider) answers the
chat program's streamed requests and records them. The path: a read answered in one
process; a change asked in a new process of the same conversation, which suspends on a
plan; the plan confirmed by `handrail plans confirm`; the run resumed in a third
process, which executes the plan once and answers `succeeded`, proven by the execution
record. Then the audit trail, another tenant's view, and tokens that never leave.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from examples.crm_chat.crm import Crm
from examples.scripted_openai import ScriptedChatServer, completion, scripted_chat_server
from handrail import Keyring
from handrail.execution import ExecutionStatus
from handrail.plans import PlanState
from handrail.store import open_store

ROOT = Path(__file__).resolve().parents[1]
CHAT = "examples.crm_chat.chat"
APP = "examples.crm_chat.app:build_registry"
HANDRAIL_CLI = "import sys; from handrail.cli import main; sys.exit(main())"
SUBPROCESS_BOUND = 120.0
"""How long one process may take before the test gives up on it, in seconds."""
TOKEN = re.compile(r"hrc1\.")
"""How every confirmation token starts (`handrail.writes.confirmation`)."""


@dataclass(kw_only=True)
class Walk:
    """What the walk left behind, for the tests to read."""

    store: Path
    crm: Crm
    server: ScriptedChatServer
    out: dict[str, str] = field(default_factory=dict)
    changes_while_suspended: list[dict[str, str]] = field(default_factory=list)
    email_while_suspended: str = ""
    plan_id: str = ""
    run_id: str = ""


def _run(
    argv: Sequence[str], env: dict[str, str], *, status: int = 0
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_BOUND,
        check=False,
    )
    assert done.returncode == status, (argv, done.stdout, done.stderr)
    return done


def _chat(env: dict[str, str], *argv: str) -> str:
    return _run(["-m", CHAT, *argv], env).stdout


def _env(tmp: Path, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HANDRAIL_"))}
    return env | {
        "PYTHONPATH": str(ROOT),
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "sk-scripted",
        "HANDRAIL_CONFIRMATION_KEYS": Keyring.new_key_text("k1"),
        "CRM_CHAT_DB": str(tmp / "crm.db"),
        "COLUMNS": "250",  # the CLI's tables unfolded
    }


def _answer(plan_id: str) -> str:
    return json.dumps(
        {
            "state": "succeeded",
            "message": "Ada's e-mail address is now ada@new.example.",
            "evidence": [{"tool": "crm__update_email", "plan_id": plan_id}],
        }
    )


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    tmp = tmp_path_factory.mktemp("crm_chat")
    store = tmp / "handrail.db"
    chat = ["--store", str(store), "--conversation", "chat-ada"]
    with scripted_chat_server() as server:
        env = _env(tmp, server.base_url)
        walked = Walk(store=store, crm=Crm(tmp / "crm.db"), server=server)
        # 1) A read, streamed, answered.
        server.add(
            completion(("call_1", "crm__find_customer", {"name": "Ada"})),
            completion(("call_2", "crm__get_customer", {"customer_id": "c-1"})),
            completion(text="Ada Lovelace's e-mail address is ada@old.example."),
        )
        walked.out["read"] = _chat(env, *chat, "what is Ada's email?")
        # 2) The same conversation, a new process: a change becomes a plan.
        server.add(
            completion(("call_3", "crm__get_customer", {"customer_id": "c-1"})),
            completion(
                ("call_4", "crm__update_email", {"customer_id": "c-1", "email": "ada@new.example"})
            ),
        )
        walked.out["change"] = _chat(env, *chat, "change it to ada@new.example")
        walked.plan_id = re.findall(r"^plan (\w+) awaits", walked.out["change"], re.MULTILINE)[0]
        walked.run_id = re.findall(r"^run (\w+) suspended", walked.out["change"], re.MULTILINE)[0]
        walked.changes_while_suspended = walked.crm.changes()
        walked.email_while_suspended = str((walked.crm.customer("acme", "c-1") or {})["email"])
        # 3) A person confirms it out of band.
        who = ["--tenant", "acme", "--user", "sam"]
        confirm = ["plans", "confirm", walked.plan_id, "--app", APP, "--store", str(store), *who]
        walked.out["confirm"] = _run(["-c", HANDRAIL_CLI, *confirm], env).stdout
        # 4) A new process resumes the run: executed once, answered, proven.
        server.add(completion(text=_answer(walked.plan_id)))
        walked.out["resume"] = _chat(env, *chat, "--resume", walked.plan_id)
        again = _run(["-m", CHAT, *chat, "--resume", walked.plan_id], env, status=2)
        walked.out["again"] = again.stdout + again.stderr
        # Another tenant's user asks for Ada over Chat Completions.
        server.add(
            completion(
                ("call_b1", "crm__find_customer", {"name": "Ada"}),
                ("call_b2", "crm__get_customer", {"customer_id": "c-1"}),
                ("call_b3", "crm__list_orders", {"customer_id": "c-1"}),
            ),
            completion(text="I cannot find a customer called Ada."),
        )
        globex = ["--tenant", "globex", "--user", "gus", "--api", "chat"]
        walked.out["globex"] = _chat(
            env, "--store", str(store), "--conversation", "chat-gus", *globex, "Ada's email?"
        )
        # ... and cannot continue Ada's conversation, or resume its run.
        for key, argv in (
            ("foreign_chat", ["hello"]),
            ("foreign_resume", ["--resume", walked.plan_id]),
        ):
            refused = _run(["-m", CHAT, *chat, *globex, *argv], env, status=2)
            walked.out[key] = refused.stdout + refused.stderr
        tail = ["audit", "tail", "--store", str(store), "--tenant", "acme", "-n", "500"]
        walked.out["audit"] = _run(["-c", HANDRAIL_CLI, *tail], env).stdout
        yield walked


def _without_boundaries(items: Sequence[Any]) -> str:
    """The items as JSON, with the random boundaries of data blocks blanked out."""
    return re.sub(r"handrail-data [0-9a-f]+", "handrail-data B", json.dumps(list(items)))


def test_a_read_streams_tool_calls_and_a_final_answer(walk: Walk) -> None:
    assert walk.out["read"].splitlines() == [
        '-> crm.find_customer {"name": "Ada"}',
        "<- ok: crm.find_customer returned 1 item(s).",
        '-> crm.get_customer {"customer_id": "c-1"}',
        "<- ok: crm.get_customer returned a result.",
        "model: Ada Lovelace's e-mail address is ada@old.example.",
        "answer [text, claimed -, verified]: Ada Lovelace's e-mail address is ada@old.example.",
    ]
    requests = walk.server.requests
    assert walk.server.paths[:3] == ["/v1/responses"] * 3
    assert all(body["stream"] is True for body in requests[:3])
    assert {tool["name"] for tool in requests[0]["tools"]} == {
        "crm__find_customer",
        "crm__get_customer",
        "crm__list_orders",
        "crm__update_email",
    }


def test_the_conversation_continues_in_a_new_process(walk: Walk) -> None:
    requests = walk.server.requests
    step_one = [
        *requests[2]["input"],
        {
            "type": "message",
            "role": "assistant",
            "content": "Ada Lovelace's e-mail address is ada@old.example.",
        },
    ]
    asked = {"type": "message", "role": "user", "content": "change it to ada@new.example"}
    for request in requests[3:5]:  # both model requests of the second process
        sent = request["input"]
        assert _without_boundaries(sent[: len(step_one)]) == _without_boundaries(step_one)
        assert sent[len(step_one)] == asked
    assert requests[0]["input"] == [
        {"type": "message", "role": "user", "content": "what is Ada's email?"}
    ]


def test_a_change_suspends_on_a_plan_and_writes_nothing(walk: Walk) -> None:
    out = walk.out["change"]
    assert f"plan {walk.plan_id} awaits NEEDS_CONFIRMATION (crm.update_email)" in out
    assert "  impact: change e-mail address of Ada Lovelace (c-1)" in out
    assert "  from ada@old.example to ada@new.example" in out
    assert f"run {walk.run_id} suspended, awaiting plan(s) {walk.plan_id}" in out
    assert walk.changes_while_suspended == []
    assert walk.email_while_suspended == "ada@old.example"
    assert walk.server.paths[3:5] == ["/v1/responses"] * 2
    assert f"CONFIRMED plan {walk.plan_id} (crm.update_email)" in walk.out["confirm"]


def test_the_resumed_run_executes_once_and_its_success_is_proven(walk: Walk) -> None:
    lines = walk.out["resume"].splitlines()
    assert lines[0] == f"resuming run {walk.run_id} with confirmed plan {walk.plan_id}"
    assert lines[1].startswith("<- ok: ")
    message = "Ada's e-mail address is now ada@new.example."
    assert f"answer [succeeded, claimed succeeded, verified]: {message}" in lines
    (key,) = [line.removeprefix("proven by: ") for line in lines if line.startswith("proven")]
    store = open_store(walk.store, migrate=False)
    try:
        record = store.get_execution(key)
        plan = store.get_plan(walk.plan_id)
    finally:
        store.close()
    assert record is not None
    assert plan is not None
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.plan_id == walk.plan_id
    assert record.business_id == "chg-1"
    assert plan.state is PlanState.EXECUTED
    # The downstream made exactly one change, under the plan's idempotency key.
    assert walk.crm.changes() == [
        {
            "idempotency_key": key,
            "change_id": "chg-1",
            "tenant": "acme",
            "customer_id": "c-1",
            "email": "ada@new.example",
        }
    ]
    # A second resume finds nothing to resume, and the model is not asked again.
    assert walk.out["again"] == "error: conversation 'chat-ada' has no suspended run\n"
    # The model heard of it in Handrail's words, with the result in a data block.
    told = walk.server.requests[5]["input"][-1]
    assert told["role"] == "user"
    assert told["content"].startswith(f"[handrail] The user confirmed plan {walk.plan_id}")


def test_the_audit_trail_shows_every_stage_of_the_write(walk: Walk) -> None:
    cells = [[c.strip() for c in line.split("\u2502")] for line in walk.out["audit"].splitlines()]
    # Columns: time, stage, decision, code, tool, call id, tenant, duration.
    stages = [row[2] for row in cells if len(row) > 5 and row[5] == "crm.update_email"]
    gate = ["lookup", "syntax", "schema", "permission", "business", "authorization"]
    # Proposed in the second process, confirmed by the CLI, executed by the third.
    later = ["token", "confirm", "claim", "outcome"]
    assert sorted(stages) == sorted([*gate, "plan", "write", *later])
    assert stages[-len(later) :] == later
    assert sorted(stages[: len(gate) + 2]) == sorted([*gate, "plan", "write"])


def test_another_tenant_never_sees_ada(walk: Walk) -> None:
    assert walk.out["globex"].splitlines()[:6] == [
        '-> crm.find_customer {"name": "Ada"}',
        '-> crm.get_customer {"customer_id": "c-1"}',
        '-> crm.list_orders {"customer_id": "c-1"}',
        "<- empty: crm.find_customer found nothing; this is a valid answer.",
        "<- NOT_FOUND: There is no such customer. Find the customer by name first.",
        "<- NOT_FOUND: There is no such customer. Find the customer by name first.",
    ]
    paths, bodies = walk.server.paths, walk.server.requests
    asked = [
        body for path, body in zip(paths, bodies, strict=True) if path.endswith("/completions")
    ]
    assert len(asked) == 2
    assert all(body["stream"] is True for body in asked)
    request = asked[1]
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert len(results) == 3
    assert not any("Ada" in text or "ada@" in text for text in results)


def test_another_tenant_cannot_continue_or_resume_the_conversation(walk: Walk) -> None:
    assert walk.out["foreign_chat"] == "error: NOT_FOUND: There is no such conversation.\n"
    assert walk.out["foreign_resume"] == "error: no conversation 'chat-ada'\n"


def test_no_confirmation_token_reaches_the_model_or_the_terminal(walk: Walk) -> None:
    bodies = [json.dumps(body) for body in walk.server.requests]
    assert len(bodies) == 8  # the refused processes never asked the model
    for text in [*bodies, *walk.out.values()]:
        assert not TOKEN.search(text)
