"""Keeps bench/redaction.py from rotting: a tiny log, one round, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("redaction")


def test_a_small_run_measures_both_paths_and_counts_the_findings(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--size-mb", "0.5", "--rounds", "1", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert {"size_mb", "chunks", "rounds", "redactor", "baseline", "ratio", "findings"} <= set(
        payload
    )
    assert payload["redactor"]["mb_per_s"] > 0
    assert payload["baseline"]["mb_per_s"] > 0
    assert len(payload["redactor"]["rounds_s"]) == 1
    planted, findings = payload["planted"], payload["findings"]
    assert planted  # the generator plants values of several kinds
    for kind, count in planted.items():
        assert findings.get(kind, 0) >= count * 0.9, kind
    assert "baseline / Redactor" in capsys.readouterr().out


def test_the_generated_log_is_the_same_for_the_same_seed(bench: ModuleType) -> None:
    first, planted = bench.generate(20_000, seed=7)
    second, _ = bench.generate(20_000, seed=7)
    assert first == second
    assert sum(planted.values()) > 0
    pieces = bench.chunks(first, size=4096)
    assert "".join(pieces) == first
    assert all(piece.endswith("\n") for piece in pieces)
