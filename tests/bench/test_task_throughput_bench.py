"""Keeps bench/task_throughput.py from rotting: a smoke run per backend, no timings.

The smoke run goes through worker processes exactly as the full benchmark does; what
is asserted is that every configuration is reported with positive numbers and both
latency percentiles, and (inside the benchmark, every sample) that each task's body and
each bare workflow ran exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("task_throughput")


def _smoke(bench: ModuleType, tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    args = ["--smoke", "--dir", str(tmp_path), "--json", str(out), *extra]
    assert bench.main(args) == 0
    payload: dict[str, object] = json.loads(out.read_text())
    return payload


def _assert_reported(payload: dict[str, object], backend: str, workers: tuple[int, ...]) -> None:
    results = payload["results"]
    assert isinstance(results, dict)
    assert set(results) == {f"{backend}_{w}" for w in workers}
    for key, row in results.items():
        assert row["backend"] == backend, key
        assert row["tasks_per_round"] == 12
        assert row["target"] == 0.8
        assert row["handrail_tasks_s"] > 0, key
        assert row["bare_tasks_s"] > 0, key
        assert row["ratio"] > 0, key
        assert len(row["rounds"]["handrail"]) == len(row["rounds"]["bare"]) == 1
        for path in ("handrail", "bare"):
            latency = row["latency_ms"][path]
            assert 0 <= latency["p50"] <= latency["p99"], key


def test_sqlite_smoke_run_reports_both_paths(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = _smoke(bench, tmp_path, "--backends", "sqlite", "--workers", "1,2")
    _assert_reported(payload, "sqlite", (1, 2))
    assert "handrail/bare" in capsys.readouterr().out


@pytest.mark.postgres
def test_postgres_smoke_run_reports_both_paths(
    bench: ModuleType, tmp_path: Path, postgres_url: str
) -> None:
    payload = _smoke(
        bench, tmp_path, "--backends", "postgres", "--workers", "2", "--pg-url", postgres_url
    )
    _assert_reported(payload, "postgres", (2,))


def test_the_null_host_answers_everything_the_seam_asks_of_a_host(bench: ModuleType) -> None:
    # A method the seam gained and the bench's host lacks fails only in the workers'
    # logs, not the run: check the whole protocol here (mypy does not see bench/).
    from handrail.tasks.runner import TaskHost  # noqa: PLC0415

    asked = {name for name in vars(TaskHost) if not name.startswith("_")}
    assert asked <= set(vars(bench.NullHost))
