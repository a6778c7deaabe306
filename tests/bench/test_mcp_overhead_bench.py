"""Keeps bench/mcp_overhead.py from rotting: one tiny round of every path, no timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


def test_every_path_is_checked_measured_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    load_bench: Callable[[str], ModuleType],
) -> None:
    module = load_bench("mcp_overhead")
    out = tmp_path / "r.json"
    args = ["--rounds", "1", "--calls", "2", "--warmup", "1", "--json", str(out)]
    assert module.main(args) == 0
    payload = json.loads(out.read_text())
    servers = {"bare-lowlevel", "bare-mcpserver", "handrail", "handrail-audit-off"}
    for transport in ("memory", "http"):
        rows = payload["results"][transport]
        assert set(rows) == servers
        assert all(len(row["rounds_us"]) == 1 for row in rows.values())
        assert rows["handrail"]["vs_bare-lowlevel"] > 0
        assert rows["handrail"]["vs_bare-mcpserver"] > 0
    assert "µs per tools/call" in capsys.readouterr().out
