"""Keeps bench/search_text.py from rotting: a tiny tree, one round of every path, no timings."""

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
    if shutil.which("rg") is None:
        reason = "ripgrep (rg) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return load_bench("search_text")


def _expected_paths() -> set[str]:
    expected = {"raw", "same_argv", "tool", "unconfined", "gate"}
    if shutil.which("bwrap") is not None:
        expected.add("bwrap")
    return expected


def test_every_path_is_measured_checked_and_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    args = ["--files", "4001", "--file-bytes", "300", "--rounds", "1", "--warmup", "0"]
    args += ["--cases", "few,many"]
    assert bench.main([*args, "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    few, many = payload["results"]["few matches"], payload["results"]["many matches"]
    assert set(few["paths"]) == _expected_paths()
    assert payload["environment"]["confined_by"] in {"landlock", "bubblewrap"}
    assert all(len(row["rounds_ms"]) == 1 for row in few["paths"].values())
    assert few["check"]["returned"] == 1
    assert few["check"]["complete"] is True
    assert many["check"]["truncated"] is True
    assert len(payload["findings"]) == 4
    assert "x raw" in capsys.readouterr().out


def test_an_existing_tree_can_be_searched(bench: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    out = tmp_path / "result.json"
    args = ["--tree", str(tmp_path), "--few", "alpha", "--many", "a", "--rounds", "1"]
    args += ["--cases", "few,many"]
    assert bench.main([*args, "--warmup", "0", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["results"]["few matches"]["check"]["total_matches"] == 1
    assert payload["environment"]["tree"] == str(tmp_path.resolve())


def test_the_mid_case_builds_its_own_tree_and_is_measured(
    bench: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    args = ["--cases", "mid", "--mid-files", "20", "--rounds", "1", "--warmup", "0"]
    assert bench.main([*args, "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    (name,) = payload["results"]
    mid = payload["results"][name]
    assert set(mid["paths"]) == _expected_paths()
    assert mid["check"]["total_matches"] > 0
