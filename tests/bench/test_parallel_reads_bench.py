"""Keeps bench/parallel_reads.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("parallel_reads")


def test_every_path_runs_its_reads_and_reports_both_ratios(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    args = ["--rounds", "1", "--tools", "3", "--delay", "0.001", "--json", str(out)]
    assert bench.main(args) == 0
    payload = json.loads(out.read_text())
    assert payload["tools"] == 3
    results = payload["results"]
    assert set(results) == {"scheduler", "gate", "batch"}
    assert all(len(r["rounds_wall_ms"]) == 1 for r in results.values())
    for name in ("scheduler", "gate"):
        assert results[name]["ratio_to_max_median"] > 0
        assert results[name]["ratio_to_sum_median"] > 0
    assert results["batch"]["ratio_to_max_median"] is None
    assert "/max(ti)" in capsys.readouterr().out
