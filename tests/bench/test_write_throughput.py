"""Keeps bench/write_throughput.py from rotting: a smoke run per backend, no timings.

The smoke run goes through worker processes exactly as the full benchmark does; what
is asserted is that every configuration is reported with positive numbers, that each
worker's tool ran once per execution, and that the database holds one SUCCEEDED
execution and one EXECUTED plan per handrail execution (and one row per bare one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SQLITE_CLIENTS = (1, 2)
POSTGRES_CLIENTS = (2,)
"""One configuration is enough to prove the PostgreSQL plumbing; each pool costs seconds."""


@pytest.fixture(scope="module")
def bench(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("write_throughput")


def _smoke(
    bench: ModuleType, tmp_path: Path, clients: tuple[int, ...], *extra: str
) -> dict[str, object]:
    out = tmp_path / "result.json"
    counts = ",".join(str(c) for c in clients)
    args = ["--smoke", "--clients", counts, "--dir", str(tmp_path), "--json", str(out), *extra]
    assert bench.main(args) == 0
    payload: dict[str, object] = json.loads(out.read_text())
    return payload


def _assert_every_execution_happened_once(
    payload: dict[str, object], backend: str, clients: tuple[int, ...]
) -> None:
    results = payload["results"]
    assert isinstance(results, dict)
    assert set(results) == {f"{backend}_{c}" for c in clients}
    for key, row in results.items():
        assert row["backend"] == backend, key
        rounds = row["rounds"]
        assert len(rounds["handrail"]) == len(rounds["bare"]) == len(rounds["ratio"]) == 1
        assert min(rounds["handrail"] + rounds["bare"] + rounds["ratio"]) > 0, key
        assert row["handrail_ops_s"] > 0, key
        assert row["bare_ops_s"] > 0, key
        assert row["ratio"] > 0, key
        assert row["target"] == 0.8
        assert row["slices_per_round"] == 2  # the smoke default
        # One smoke round plus the warm-up, on each path.
        executed = row["executions_per_round"] + row["warmup_executions"]
        assert executed >= row["clients"]
        assert row["tool_calls"] == {"handrail": executed, "bare": executed}, key
        assert row["verified"] == {
            "handrail_executions_succeeded": executed,
            "handrail_plans_executed": executed,
            "bare_rows_succeeded": executed,
        }, key
    assert payload["notes"] == []


def test_sqlite_smoke_run_executes_every_plan_once_and_reports_it(
    bench: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _smoke(bench, tmp_path, SQLITE_CLIENTS, "--backends", "sqlite")
    _assert_every_execution_happened_once(payload, "sqlite", SQLITE_CLIENTS)
    environment = payload["environment"]
    assert isinstance(environment, dict)
    assert "postgres" not in environment
    printed = capsys.readouterr().out
    assert "handrail/bare" in printed
    assert "bare (sqlite): sqlite3 (raw driver)" in printed


@pytest.mark.postgres
def test_postgres_smoke_run_executes_every_plan_once_and_reports_it(
    bench: ModuleType,
    tmp_path: Path,
    postgres_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    payload = _smoke(
        bench, tmp_path, POSTGRES_CLIENTS, "--backends", "postgres", "--pg-url", postgres_url
    )
    _assert_every_execution_happened_once(payload, "postgres", POSTGRES_CLIENTS)
    environment = payload["environment"]
    assert isinstance(environment, dict)
    postgres = environment["postgres"]
    assert isinstance(postgres, dict)
    assert postgres["synchronous_commit"] == "on"
    assert "bare (postgres): psycopg 3 (raw driver)" in capsys.readouterr().out
