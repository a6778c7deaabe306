"""Keeps bench/tool_search.py from rotting: one tiny round of both paths, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def test_tokens_latency_and_quality_are_measured_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    load_bench: Callable[[str], ModuleType],
) -> None:
    module = load_bench("tool_search")
    out = tmp_path / "r.json"
    assert module.main(["--rounds", "1", "--queries", "20", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    tokens = results["tokens"]
    assert tokens["tools_registered"] == 1001
    # The principal lacks one domain of 50 tools; search_tools itself is not counted.
    assert tokens["tools_the_principal_may_use"] == 950
    assert 0 < tokens["with_search_tokens"] < tokens["every_definition_tokens"]
    assert tokens["average_tools_found"] > 0
    assert set(results["latency_us"]) == {"index", "search_tools"}
    assert all(len(row["rounds_p99"]) == 1 for row in results["latency_us"].values())
    assert 0 < results["quality"]["index_top5"] <= 1
    assert "tokens per turn" in capsys.readouterr().out
