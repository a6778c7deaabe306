"""Keeps bench/sandbox_start.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("sandbox_start")


def test_every_path_runs_true_and_is_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    args = ["--rounds", "1", "--runs", "2", "--warmup", "1", "--files", "3", "--json", str(out)]
    assert bench.main(args) == 0
    payload = json.loads(out.read_text())
    results = payload["results"]
    assert {"subprocess", "sandbox_plain"} <= set(results)
    assert all(len(result["rounds_ms"]) == 1 for result in results.values())
    assert "sandbox_plain_vs_subprocess" in payload["ratios"]
    assert payload["leftover_run_directories"] == 0
    if shutil.which("bwrap") is not None and not payload["notes"]:
        assert {"bwrap_bare", "sandbox_bwrap"} <= set(results)
        assert "sandbox_bwrap_vs_bwrap_bare" in payload["ratios"]
    elif os.environ.get("CI") == "true":
        pytest.fail(f"bubblewrap paths did not run: {payload['notes']}")
    assert "vs subprocess" in capsys.readouterr().out
