"""Keeps bench/policy_decision.py from rotting: one tiny round of every case, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def test_every_case_is_checked_measured_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    load_bench: Callable[[str], ModuleType],
) -> None:
    module = load_bench("policy_decision")
    out = tmp_path / "result.json"
    assert module.main(["--rounds", "1", "--calls", "3", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results) == {
        "dict",
        "allow_all",
        "rules_1",
        "rules_100",
        "rules_10000",
        "patterns_10000",
        "worst_100",
        "worst_10000",
    }
    assert results["rules_10000"]["rules"] == 10_000
    assert results["worst_100"]["rules_for_tool"] == 100
    assert all(row["ratio_vs_dict"] > 0 for row in results.values())
    assert "x dict" in capsys.readouterr().out
