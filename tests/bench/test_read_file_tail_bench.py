"""Keeps bench/read_file_tail.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("read_file_tail")


def test_every_path_reads_the_same_last_lines_and_is_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    args = ["--size-mb", "3", "--rounds", "1", "--repeat", "1", "--dir", str(tmp_path)]
    assert bench.main([*args, "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    results = payload["results"]
    assert set(results) == {"tail", "python_whole", "handrail", "handrail_tool"}
    for name, result in results.items():
        assert len(result["rounds_s"]) == 1
        assert result["median_s"] > 0, name
    # The naive read holds the whole file; read_file holds a block or two.
    assert results["python_whole"]["tracemalloc_peak_mib"] >= 3
    assert results["handrail"]["tracemalloc_peak_mib"] < 1
    assert results["handrail_tool"]["tracemalloc_peak_mib"] < 1
    assert set(payload["ratios"]) == {
        "handrail_vs_tail",
        "handrail_vs_python_whole",
        "handrail_tool_vs_tail",
        "handrail_tool_vs_python_whole",
    }
    assert payload["size_bytes"] == 3 * 1024 * 1024
    assert list(tmp_path.glob("handrail-tail-*")) == []  # the file is deleted
    assert "RSS growth" in capsys.readouterr().out


def test_the_file_has_exactly_the_requested_size_and_ends_a_line(bench: ModuleType) -> None:
    for size in (1, 10, 1024 * 1024, 3 * 1024 * 1024 + 17):
        pieces = list(bench.text_pieces(size))
        assert sum(map(len, pieces)) == size
        assert pieces[-1].endswith(b"\n")


def test_too_little_free_space_is_refused_before_writing(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--size-mb", str(1 << 40), "--dir", str(tmp_path)]) == 2
    assert "not enough free space" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_file_can_be_kept(bench: ModuleType, tmp_path: Path) -> None:
    args = ["--size-mb", "1", "--rounds", "1", "--repeat", "1", "--dir", str(tmp_path)]
    assert bench.main([*args, "--keep-file"]) == 0
    [kept] = tmp_path.glob("handrail-tail-*/big.log")
    assert kept.stat().st_size == 1024 * 1024
