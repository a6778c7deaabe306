"""Keeps bench/startup.py from rotting: one round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("startup")


def test_every_path_runs_and_is_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--rounds", "1", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert set(payload["results"]) == {
        "pass",
        "pydantic",
        "pydantic_model",
        "handrail",
        "handrail_app",
        "typer_help",
        "handrail_help",
    }
    assert all(row["rss_mb_median"] > 0 for row in payload["results"].values())
    assert "handrail_help_vs_typer_help" in payload["ratios"]
    assert payload["loaded_after_import_handrail"] == []
    assert "handrail_vs_pass" in capsys.readouterr().out
