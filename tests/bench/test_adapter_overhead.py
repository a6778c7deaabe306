"""Keeps bench/adapter_overhead.py from rotting: one tiny round of every format, no timings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "adapter_overhead.py"


def test_every_format_is_parsed_rendered_and_reported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("adapter_overhead", _SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        out = tmp_path / "r.json"
        assert module.main(["--rounds", "1", "--calls", "2", "--json", str(out)]) == 0
    finally:
        del sys.modules[spec.name]
    results = json.loads(out.read_text())
    assert set(results) == {"openai-chat", "openai-responses", "anthropic", "gemini"}
    assert all(row["ratio"] > 0 for row in results.values())
    assert "parse+render" in capsys.readouterr().out
