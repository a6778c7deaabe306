"""Keeps bench/gate_overhead.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("gate_overhead")


def _run(bench: ModuleType, tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    args = ["--rounds", "1", "--calls", "3", "--warmup", "1", "--json", str(out), *extra]
    assert bench.main(args) == 0
    payload: dict[str, object] = json.loads(out.read_text())
    return payload


def test_every_handrail_path_is_checked_measured_and_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _run(bench, tmp_path)
    results = payload["results"]
    assert isinstance(results, dict)
    assert set(results) == {
        "baseline",
        "baseline_sync",
        "handrail",
        "handrail_memory",
        "handrail_sqlite",
        "handrail_sync",
    }
    assert all(len(r["rounds_us"]) == 1 for r in results.values())
    out = capsys.readouterr().out
    assert "Handrail (audit off) / baseline" in out
    assert "Audit on, SQLite / audit off" in out


def test_every_peer_path_still_validates_and_calls_its_tool(
    bench: ModuleType,
    tmp_path: Path,
) -> None:
    for module in ("agents", "pydantic_ai", "langchain_core", "mcp"):
        pytest.importorskip(module)
    payload = _run(bench, tmp_path, "--peers")
    results = payload["results"]
    assert isinstance(results, dict)
    assert {"openai_agents", "pydantic_ai", "langchain", "mcp"} <= set(results)
    assert payload["notes"] == []


def test_the_telemetry_paths_are_checked_measured_and_reported(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _run(bench, tmp_path, "--telemetry")
    results = payload["results"]
    assert isinstance(results, dict)
    telemetry = {"handrail_otel_noop", "handrail_otel_sdk", "handrail_otel_unsampled"}
    assert telemetry <= set(results)
    assert all(len(results[key]["round_ratios_vs_handrail"]) == 1 for key in telemetry)
    out = capsys.readouterr().out
    assert "Telemetry on a no-op API provider / no telemetry (audit off)" in out
