"""A skill script swapped after the library was loaded never runs what it now points to.

The library checked every file on load (no links); a host user who later swaps a
listed script for a symbolic link, or for another file with several hard links, must
not get run_skill_script to run the target, whatever the sandbox would see of it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from _skill_folders import call, copy_examples, skill_gate
from handrail.envelope import Status
from handrail.errors import ErrorCode, NotFound
from handrail.skills import SkillLibrary
from handrail.testing import MemoryAuditSink
from handrail.tools.sandbox import Sandbox, SandboxConfig, SandboxLimits

pytestmark = pytest.mark.anyio

PYTHON = {".py": (sys.executable,)}
INTERPRETER_PATHS = tuple(sorted({Path(sys.prefix), Path(sys.base_prefix)}))
SCRIPT = {"skill": "inventory-report", "script": "scripts/reorder_points.py"}


def _sandbox(workspace: Path, tmp_path: Path, **options: Any) -> Sandbox:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    options.setdefault("read_only_paths", (*INTERPRETER_PATHS, tmp_path / "outside"))
    options.setdefault("limits", SandboxLimits(timeout_seconds=60))
    return Sandbox(SandboxConfig(workspace=workspace, scratch_dir=scratch, user=None, **options))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "evil.py").write_text("print('RAN-OUTSIDE')\n", encoding="utf-8")
    return folder / "evil.py"


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
async def test_a_script_swapped_after_loading_does_not_run_its_target(
    tmp_path: Path, outside: Path, how: str
) -> None:
    root = copy_examples(tmp_path / "skills")
    library = SkillLibrary.load(root)
    sink = MemoryAuditSink()
    gate = skill_gate(library, sandbox=_sandbox(root, tmp_path), interpreters=PYTHON, audit=sink)
    script = root / "inventory-report" / "scripts" / "reorder_points.py"
    script.unlink()
    if how == "symlink":
        script.symlink_to(outside)
    else:
        os.link(outside, script)
    envelope = await call(gate, "run_skill_script", SCRIPT)
    assert envelope.status is Status.ERROR
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "RAN-OUTSIDE" not in str(envelope.data)
    refused = [(e.stage, e.decision, e.code) for e in sink.events if e.kind == "skill"]
    assert refused[-1] == ("script", "refused", "INVALID_ARGUMENTS")


async def test_a_removed_script_is_not_found_and_nothing_runs(tmp_path: Path) -> None:
    root = copy_examples(tmp_path / "skills")
    library = SkillLibrary.load(root)
    gate = skill_gate(library, sandbox=_sandbox(root, tmp_path), interpreters=PYTHON)
    (root / "inventory-report" / "scripts" / "reorder_points.py").unlink()
    envelope = await call(gate, "run_skill_script", SCRIPT)
    assert envelope.error_type is ErrorCode.NOT_FOUND


def test_only_a_listed_script_is_checked(tmp_path: Path) -> None:
    library = SkillLibrary.load(copy_examples(tmp_path / "skills"))
    for skill, script in (("inventory-report", "scripts/other.py"), ("nope", "x.py")):
        with pytest.raises(NotFound):
            library.check_script(skill, script)
