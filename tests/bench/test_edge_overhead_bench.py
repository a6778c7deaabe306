"""Keeps bench/edge_overhead.py from rotting: one tiny round of every case, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def test_every_case_answers_is_measured_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    load_bench: Callable[[str], ModuleType],
) -> None:
    module = load_bench("edge_overhead")
    out = tmp_path / "r.json"
    assert module.main(["--rounds", "1", "--requests", "2", "--json", str(out)]) == 0
    cases = json.loads(out.read_text())["cases"]

    names = ["none", "no-op", "sdk"]
    assert list(cases) == [*names, *(f"bare {n}" for n in names)]
    assert all(len(case["rounds"]) == 1 for case in cases.values())
    assert cases["none"]["ratio_to_none"] == 1.0
    assert cases["bare none"]["ratio_to_none"] == 1.0
    assert cases["sdk"]["ratio_to_none"] > 0
    assert "POST /v1/calls: telemetry" in capsys.readouterr().out
