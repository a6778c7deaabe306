"""The large-catalogue example: tools found by search become callable, a skill narrows.

Runs `examples.catalogue.demo` as a newcomer would and checks what each step showed the
scripted model: the core set first, the found tool after the search, the selected
skill's tools (and the meta-tools) alone in the skill's run, where a tool outside the
skill is UNKNOWN_TOOL.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from examples.catalogue.demo import LEAD_TIMES, run_demo

ROOT = Path(__file__).resolve().parents[1]
SKILL_SET = [
    "bookstore.check_inventory",
    "bookstore.search_books",
    "load_skill",
    "read_skill_file",
    "search_tools",
]


def test_a_search_makes_the_found_tool_callable_at_the_next_step(tmp_path: Path) -> None:
    summary = asyncio.run(run_demo(tmp_path))
    run = summary["search_run"]
    assert run["status"] == "FINISHED"
    first, second, _ = run["steps"]
    assert not [name for name in first["shown"] if name.startswith("backoffice.")]
    assert LEAD_TIMES in second["shown"]
    assert run["calls"] == ["ok", "ok"]
    # The first step's definitions are a small part of the whole catalogue's.
    assert first["definition_chars"] * 10 < summary["all_definitions"]["chars"]
    assert summary["all_definitions"]["tools"] > 180


def test_a_selected_skill_narrows_the_run_to_its_tools(tmp_path: Path) -> None:
    run = asyncio.run(run_demo(tmp_path))["skill_run"]
    assert run["status"] == "FINISHED"
    assert [step["shown"] for step in run["steps"]] == [SKILL_SET] * 3
    assert run["calls"] == ["ok", "error/UNKNOWN_TOOL"]


def test_the_example_runs_as_a_program(tmp_path: Path) -> None:
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "examples.catalogue.demo", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["search_run"]["calls"] == ["ok", "ok"]
