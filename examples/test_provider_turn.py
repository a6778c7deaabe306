from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from examples.provider_turn import RESPONSES, run_turn


def _contents(provider: str, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if provider == "openai-chat":
        return [json.loads(m["content"]) for m in rendered]
    if provider == "openai-responses":
        return [json.loads(item["output"]) for item in rendered]
    if provider == "anthropic":
        [message] = rendered
        return [json.loads(block["content"]) for block in message["content"]]
    [content] = rendered
    return [next(iter(part["functionResponse"]["response"].values())) for part in content["parts"]]


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
