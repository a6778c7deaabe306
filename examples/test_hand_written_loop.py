from __future__ import annotations

import json
from typing import Any

import pytest

from examples import hand_written_loop
from examples.hand_written_loop import SCRIPT, run_demo
from examples.scripted_openai import scripted_chat_server
from handrail.shaping.marking import read_block


def _envelope(text: str) -> dict[str, Any]:
    block = read_block(text.split("\n", 1)[1] if text.startswith("[handrail]") else text)
    assert block is not None
    envelope: dict[str, Any] = json.loads(block.body)
    return envelope


@pytest.fixture(autouse=True)
def _fresh_contacts(monkeypatch: pytest.MonkeyPatch) -> None:
    contacts = {"acme": {"c-1": {"name": "Ana Lima", "email": "ana@old.example"}}}
    monkeypatch.setattr(hand_written_loop, "CONTACTS", contacts)


@pytest.mark.anyio
async def test_the_hand_written_loop_reads_plans_confirms_and_tells_the_model() -> None:
    with scripted_chat_server(SCRIPT) as server:
        messages = await run_demo(server.base_url)
        requests = server.requests
    assert len(requests) == 3
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {
        "crm__find_contact",
        "crm__update_email",
    }
    # Each request after a turn with calls has the assistant message, then its results.
    roles = [[m["role"] for m in r["messages"]] for r in requests]
    assert roles == [
        ["system", "user"],
        ["system", "user", "assistant", "tool"],
        ["system", "user", "assistant", "tool", "assistant", "tool", "user"],
    ]
    second = requests[1]["messages"]
    assert second[2]["tool_calls"][0]["id"] == second[3]["tool_call_id"] == "call_1"
    assert _envelope(second[3]["content"])["data"] == [{"contact_id": "c-1", "name": "Ana Lima"}]
    third = requests[2]["messages"]
    assert third[4]["tool_calls"][0]["id"] == third[5]["tool_call_id"] == "call_2"
    proposed = _envelope(third[5]["content"])
    assert proposed["error_type"] == "NEEDS_CONFIRMATION"
    confirmed = third[6]["content"]
    assert confirmed.startswith(f"[handrail] The user confirmed plan {proposed['data']['plan_id']}")
    assert "(proposed by call call_2 of crm.update_email)" in confirmed
    ran = _envelope(confirmed)
    assert ran["status"] == "ok"
    assert ran["data"] == {"contact_id": "c-1", "email": "ana@new.example"}
    assert messages[-1] == {
        "role": "assistant",
        "content": "Done: Ana Lima's e-mail address is now ana@new.example.",
    }
    assert hand_written_loop.CONTACTS["acme"]["c-1"]["email"] == "ana@new.example"


def test_the_script_runs_as_a_module(capsys: pytest.CaptureFixture[str]) -> None:
    hand_written_loop.main()
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" - ")[0] for line in printed] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
