"""`handrail conversations list|show`: a tenant's stored chats, read from SQLite or PostgreSQL."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from handrail import cli
from handrail.adapters.transcript import AssistantTurn, ToolResult, ToolResultsTurn, UserTurn
from handrail.calls import ToolCall
from handrail.conversations import ConversationRecord
from handrail.loop._agent_record import dump_turn
from handrail.store import open_store

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ESC = "\x1b"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("HANDRAIL_STORE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return CliRunner()


def _chat(
    url: str,
    conversation_id: str,
    *,
    tenant: str = "hospital-a",
    user: str = "u-1",
    at: datetime = T0,
    text: str = "Is the LIS up?",
) -> None:
    call = ToolCall(id="call_1", name="asset_status", arguments='{"asset_id": "lis"}')
    turns = (
        UserTurn(text=text),
        AssistantTurn(text="Let me look.", calls=(call,)),
        ToolResultsTurn(
            results=(
                ToolResult(call_id="call_1", tool="asset_status", content="down", is_error=False),
            )
        ),
        AssistantTurn(text="The LIS is down."),
    )
    store = open_store(url, migrate=False)
    try:
        assert store.insert_conversation(
            ConversationRecord(
                conversation_id=conversation_id,
                tenant_id=tenant,
                user_id=user,
                turns=0,
                run_id="run-1",
                created_at=T0,
                updated_at=T0,
            )
        )
        assert store.append_turns(
            conversation_id, [dump_turn(turn) for turn in turns], expect_turns=0, at=at
        )
    finally:
        store.close()


def _conversations(runner: CliRunner, *arguments: str) -> tuple[int, str, str]:
    result = runner.invoke(cli.app, ["conversations", *arguments])
    return result.exit_code, result.stdout, result.stderr


def test_conversations_list_shows_a_tenants_chats_newest_first_and_filters_by_user(
    runner: CliRunner, store_url: str
) -> None:
    _chat(store_url, "chat-old", at=T0)
    _chat(store_url, "chat-new", user="u-2", at=T0 + timedelta(minutes=5))
    _chat(store_url, "chat-other", tenant="hospital-b")
    code, out, err = _conversations(runner, "list", "--store", store_url, "--tenant", "hospital-a")
    assert code == 0, err
    assert out.index("chat-new") < out.index("chat-old")
    assert "chat-other" not in out
    assert "2 conversation(s)" in out
    code, out, _ = _conversations(
        runner, "list", "--store", store_url, "--tenant", "hospital-a", "--user", "u-1"
    )
    assert code == 0
    assert "chat-old" in out
    assert "chat-new" not in out
    code, out, _ = _conversations(runner, "list", "--store", store_url, "--tenant", "nobody")
    assert (code, out.strip()) == (0, "no matching conversations in tenant nobody")


def test_conversations_show_prints_every_turn(runner: CliRunner, store_url: str) -> None:
    _chat(store_url, "chat-1")
    code, out, err = _conversations(
        runner, "show", "chat-1", "--store", store_url, "--tenant", "hospital-a"
    )
    assert code == 0, err
    for expected in (
        "u-1",
        "run-1",
        "transcript, 4 turn(s)",
        "Is the LIS up?",
        "calls asset_status [call_1]",
        "result of asset_status [call_1]",
        "The LIS is down.",
    ):
        assert expected in out


def test_conversations_show_escapes_what_a_user_wrote_and_never_reads_markup(
    runner: CliRunner, store_url: str
) -> None:
    _chat(store_url, "chat-1", text=f"[bold red]hi[/] {ESC}]52;c;evil{ESC}\\ [link=x]y[/link]")
    code, out, _ = _conversations(
        runner, "show", "chat-1", "--store", store_url, "--tenant", "hospital-a"
    )
    assert code == 0
    assert ESC not in out
    assert "[bold red]hi[/]" in out
    assert "[link=x]y[/link]" in out


def test_conversations_show_of_another_tenants_chat_is_not_found_like_a_missing_one(
    runner: CliRunner, store_url: str
) -> None:
    _chat(store_url, "chat-b", tenant="hospital-b")
    other = _conversations(runner, "show", "chat-b", "--store", store_url, "--tenant", "hospital-a")
    missing = _conversations(
        runner, "show", "chat-x", "--store", store_url, "--tenant", "hospital-a"
    )
    assert (other[0], missing[0]) == (2, 2)
    assert other[2] == missing[2].replace("chat-x", "chat-b")
    assert "The LIS" not in other[1]
