"""Keeps bench/shape_stream.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("shape_stream")


def test_every_path_is_measured_and_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "result.json"
    args = ["--size-mb", "2", "--rounds", "1", "--dir", str(tmp_path), "--json", str(out)]
    assert bench.main(args) == 0
    payload = json.loads(out.read_text())
    assert set(payload["results"]) == {"wc_c", "wc_l", "shape_file", "shape_generator"}
    for key in ("shape_file", "shape_generator"):
        result = payload["results"][key]
        assert len(result["rounds_s"]) == 1
        assert result["peak_rss_mib"] > 0
    assert set(payload["ratios"]) == {
        "shape_file_vs_wc_c",
        "shape_file_vs_wc_l",
        "shape_generator_vs_wc_c",
        "shape_generator_vs_wc_l",
    }
    assert payload["size_bytes"] == 2 * 1024 * 1024
    excerpt = payload["excerpt"]
    assert excerpt["total_chars"] == 2 * 1024 * 1024
    assert excerpt["text_chars"] <= 16_384
    assert excerpt["exit_code"] == 1
    assert excerpt["failed_tests"] == 2
    assert {"idle_rss_mib", "rss_target_mib", "rss_within_target"} <= set(payload)
    assert list(tmp_path.glob("handrail-shape-*")) == []  # the log is deleted
    assert "peak RSS" in capsys.readouterr().out


def test_the_log_has_exactly_the_requested_size(bench: ModuleType) -> None:
    for size in (0, 10, 34, 35, 70_000, 3 * 1024 * 1024 + 17):
        assert sum(map(len, bench.log_pieces(size))) == size


def test_too_little_free_space_is_refused_before_writing(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--size-mb", str(1 << 40), "--dir", str(tmp_path)]) == 2
    assert "not enough free space" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_log_can_be_kept(bench: ModuleType, tmp_path: Path) -> None:
    assert (
        bench.main(["--size-mb", "1", "--rounds", "1", "--dir", str(tmp_path), "--keep-file"]) == 0
    )
    [kept] = tmp_path.glob("handrail-shape-*/build.log")
    assert kept.stat().st_size == 1024 * 1024
