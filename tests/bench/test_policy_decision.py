"""Keeps bench/policy_decision.py from rotting: one tiny round of every case, no timings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "policy_decision.py"


def test_every_case_is_checked_measured_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("policy_decision", _SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        out = tmp_path / "result.json"
        assert module.main(["--rounds", "1", "--calls", "3", "--json", str(out)]) == 0
    finally:
        del sys.modules[spec.name]
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
