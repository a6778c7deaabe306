from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from examples.provider_turn import RESPONSES, run_turn
from handrail.shaping.marking import read_block


def _shown(text: str) -> dict[str, Any]:
    """The envelope the model reads inside a result's data block."""
    block = read_block(text)
    assert block is not None
    envelope: dict[str, Any] = json.loads(block.body)
    return envelope


def _contents(provider: str, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if provider == "openai-chat":
        return [_shown(m["content"]) for m in rendered]
    if provider == "openai-responses":
        return [_shown(item["output"]) for item in rendered]
    if provider == "anthropic":
        [message] = rendered
        return [_shown(block["content"]) for block in message["content"]]
    [content] = rendered
    values = [
        next(iter(part["functionResponse"]["response"].values())) for part in content["parts"]
    ]
    return [_shown(value) for value in values]


@pytest.mark.anyio
@pytest.mark.parametrize("provider", list(RESPONSES))
async def test_a_two_call_turn_runs_and_renders_back_in_every_format(
    provider: str,
    tmp_path: Path,
) -> None:
    rendered = await run_turn(provider, tmp_path / "books.db")
    search, status = _contents(provider, rendered)
    assert search["status"] == "ok"
    assert [book["title"] for book in search["data"]] == ["Emma", "Pride and Prejudice"]
    assert status["status"] == "ok"
    assert status["data"]["order_id"] == "ORD-1001"
