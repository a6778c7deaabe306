"""The README's library example runs as written and prints what it claims."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import types
from pathlib import Path

import pytest
from examples import hand_written_loop
from examples.scripted_openai import scripted_chat_server

README = Path(__file__).parent.parent / "README.md"


def _block(marker: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker}:.*?-->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match is not None
    return match.group(1)


def _quickstart() -> str:
    return _block("quickstart")


def _printed(code: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102
    return out.getvalue().splitlines()


def test_the_readme_example_is_at_most_twenty_lines_of_code() -> None:
    assert len([line for line in _quickstart().splitlines() if line.strip()]) <= 20


def test_the_readme_example_runs_and_prints_an_ok_and_a_refusal() -> None:
    lines = _printed(_quickstart())
    shown = json.loads(lines[0])
    assert shown["status"] == "ok"
    assert shown["data"] == {"isbn": "9780134685991", "tenant": "acme", "in_stock": 3}
    assert "'$.isbn': " in lines[1]
    assert "'$.tenant': 'is not allowed'" in lines[1]


def test_the_write_hooks_example_plans_confirms_and_runs_once() -> None:
    assert _printed(_block("write-hooks")) == ["NEEDS_CONFIRMATION SUCCEEDED chg-1"]


@pytest.mark.anyio
async def test_the_hand_written_loop_runs_as_written_against_a_scripted_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("readme_hand_written_loop")  # dataclasses look it up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_block("hand-written-loop"), "README.md", "exec"), module.__dict__)  # noqa: S102
    for name in ("converse", "confirm_and_continue"):
        monkeypatch.setattr(hand_written_loop, name, getattr(module, name))
    monkeypatch.setattr(
        hand_written_loop,
        "CONTACTS",
        {"acme": {"c-1": {"name": "Ana Lima", "email": "ana@old.example"}}},
    )
    with scripted_chat_server(hand_written_loop.SCRIPT) as server:
        messages = await hand_written_loop.run_demo(server.base_url)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert messages[6]["content"].startswith("[handrail] The user confirmed plan ")
    assert hand_written_loop.CONTACTS["acme"]["c-1"]["email"] == "ana@new.example"
