"""Keeps bench/adapter_overhead.py from rotting: one tiny round of every format, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def test_every_format_is_parsed_rendered_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    load_bench: Callable[[str], ModuleType],
) -> None:
    module = load_bench("adapter_overhead")
    out = tmp_path / "r.json"
    assert module.main(["--rounds", "1", "--calls", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results) == {"openai-chat", "openai-responses", "anthropic", "gemini"}
    assert all(row["ratio"] > 0 for row in results.values())
    assert "parse+render" in capsys.readouterr().out
