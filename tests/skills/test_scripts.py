"""run_skill_script through a real Gate: a listed script, run in the command sandbox.

The sandbox keeps the host's user (the test interpreter lives under paths only root may
read here) and sees this interpreter read-only, as tests/tools/test_commands.py does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from _skill_folders import call, copy_examples, skill_gate, write_skill
from handrail.envelope import Status
from handrail.errors import ConfigurationError, ErrorCode
from handrail.skills import SkillLibrary, skill_tools
from handrail.skills._scripts import ScriptRunner
from handrail.testing import MemoryAuditSink
from handrail.tools.sandbox import Sandbox, SandboxConfig, SandboxLimits

pytestmark = pytest.mark.anyio

PYTHON = {".py": (sys.executable,)}
INTERPRETER_PATHS = tuple(sorted({Path(sys.prefix), Path(sys.base_prefix)}))


def _sandbox(workspace: Path, tmp_path: Path, **options: Any) -> Sandbox:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    options.setdefault("read_only_paths", INTERPRETER_PATHS)
    options.setdefault("limits", SandboxLimits(timeout_seconds=60))
    return Sandbox(SandboxConfig(workspace=workspace, scratch_dir=scratch, user=None, **options))


@pytest.fixture
def library_root(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "skills")


async def test_a_listed_script_runs_in_the_sandbox_and_is_audited(
    library_root: Path,
    tmp_path: Path,
) -> None:
    library = SkillLibrary.load(library_root)
    sink = MemoryAuditSink()
    gate = skill_gate(
        library,
        sandbox=_sandbox(library_root, tmp_path),
        interpreters=PYTHON,
        audit=sink,
    )
    loaded = await call(gate, "load_skill", {"name": "inventory-report"})
    assert loaded.data["scripts"] == ["scripts/reorder_points.py"]
    arguments = {"skill": "inventory-report", "script": "scripts/reorder_points.py"}
    envelope = await call(gate, "run_skill_script", arguments)
    assert envelope.status is Status.OK, envelope
    data = envelope.data
    assert (data["skill"], data["script"], data["exit_code"]) == (
        "inventory-report",
        "scripts/reorder_points.py",
        0,
    )
    assert data["stdout"]["text"].splitlines() == [
        "north-books: reorder at 19",
        "harbor-press: reorder at 14",
        "lantern: reorder at 17",
    ]
    script_events = [e for e in sink.events if e.kind == "skill" and e.stage == "script"]
    assert [json.loads(e.detail or "") for e in script_events] == [
        {**arguments, "exit_code": 0, "isolated": data["protections"].count("namespaces") == 1},
    ]


async def test_a_script_works_on_a_throwaway_copy_never_in_process(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "writer",
        files={
            "scripts/write.py": (
                "import os\nopen('skills-were-here', 'w').write('x')\nprint(os.getpid())\n"
            ),
        },
    )
    gate = skill_gate(
        SkillLibrary.load(root),
        sandbox=_sandbox(root, tmp_path),
        interpreters=PYTHON,
    )
    envelope = await call(
        gate, "run_skill_script", {"skill": "writer", "script": "scripts/write.py"}
    )
    assert envelope.data["exit_code"] == 0
    assert int(envelope.data["stdout"]["text"]) != os.getpid()
    assert not (root / "skills-were-here").exists()


async def test_a_script_of_another_skill_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "one", files={"scripts/a.py": "print(1)\n"})
    write_skill(root, "two", files={"scripts/b.py": "print(2)\n", "scripts/notes.txt": "n"})
    sink = MemoryAuditSink()
    library = SkillLibrary.load(root)
    gate = skill_gate(library, sandbox=_sandbox(root, tmp_path), interpreters=PYTHON, audit=sink)
    run = next(t for t in skill_tools(library, sandbox=_sandbox(root, tmp_path)) if "run" in t.name)
    properties = run.spec.input_schema["properties"]
    assert properties["skill"]["enum"] == ["one", "two"]
    assert properties["script"]["enum"] == ["scripts/a.py", "scripts/b.py"]  # .txt: no interpreter
    envelope = await call(gate, "run_skill_script", {"skill": "one", "script": "scripts/b.py"})
    assert envelope.error_type is ErrorCode.NOT_FOUND
    event = next(e for e in sink.events if e.kind == "skill" and e.stage == "script")
    assert (event.decision, event.code) == ("refused", "NOT_FOUND")
    assert not (tmp_path / "scratch").exists() or not list((tmp_path / "scratch").iterdir())


@pytest.mark.parametrize(
    "arguments",
    [
        {"skill": "inventory-report", "script": "scripts/reorder_points.py", "args": ["-c"]},
        {"skill": "inventory-report", "script": "../../../bin/sh"},
        {"skill": "inventory-report", "script": "/usr/bin/id"},
        {"skill": "inventory-report"},
    ],
)
async def test_nothing_but_listed_names_reaches_the_sandbox(
    library_root: Path,
    tmp_path: Path,
    arguments: dict[str, Any],
) -> None:
    gate = skill_gate(
        SkillLibrary.load(library_root),
        sandbox=_sandbox(library_root, tmp_path),
        interpreters=PYTHON,
    )
    envelope = await call(gate, "run_skill_script", arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert not list((tmp_path / "scratch").iterdir())


async def test_a_host_that_cannot_isolate_refuses_when_isolation_is_required(
    library_root: Path,
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(library_root, tmp_path, use_bubblewrap=False, require_isolation=True)
    sink = MemoryAuditSink()
    gate = skill_gate(SkillLibrary.load(library_root), sandbox=sandbox, audit=sink)
    arguments = {"skill": "inventory-report", "script": "scripts/reorder_points.py"}
    envelope = await call(gate, "run_skill_script", arguments)
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert "disabled" in envelope.summary
    assert [e.decision for e in sink.events if e.stage == "script"] == ["refused"]


def test_the_script_path_follows_where_the_sandbox_sees_the_library(tmp_path: Path) -> None:
    root = tmp_path / "project" / "skills"
    write_skill(root, "tool", files={"scripts/run.sh": "echo hi\n", "scripts/run.py": "print()"})
    library = SkillLibrary.load(root)
    inside = ScriptRunner(library, _sandbox(tmp_path / "project", tmp_path), {".sh": ("sh",)})
    assert inside.scripts == {"tool": ("scripts/run.sh",)}
    assert inside.argv("tool", "scripts/run.sh") == ("sh", "./skills/tool/scripts/run.sh")
    at_root = ScriptRunner(library, _sandbox(root, tmp_path), {".py": ("python3", "-I")})
    assert at_root.argv("tool", "scripts/run.py") == ("python3", "-I", "./tool/scripts/run.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    read_only = _sandbox(elsewhere, tmp_path, read_only_paths=(*INTERPRETER_PATHS, tmp_path))
    beside = ScriptRunner(library, read_only, {".py": ("python3",)})
    assert beside.argv("tool", "scripts/run.py") == ("python3", f"{root}/tool/scripts/run.py")
    with pytest.raises(ConfigurationError, match="neither inside the sandbox's workspace"):
        ScriptRunner(library, _sandbox(elsewhere, tmp_path), {".py": ("python3",)})


@pytest.mark.parametrize(
    "interpreters",
    [{"py": ("python3",)}, {".": ("python3",)}, {".py": ()}, {".py": "python3"}, {".py": ("",)}],
)
def test_interpreters_are_checked(tmp_path: Path, interpreters: dict[str, Any]) -> None:
    root = tmp_path / "skills"
    write_skill(root, "tool", files={"scripts/run.py": "print()"})
    with pytest.raises(ConfigurationError, match="interpreter"):
        ScriptRunner(SkillLibrary.load(root), _sandbox(root, tmp_path), interpreters)


def test_without_runnable_scripts_there_is_no_run_tool(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(root, "tool", files={"scripts/run.rb": "puts 1"})
    made = skill_tools(SkillLibrary.load(root), sandbox=_sandbox(root, tmp_path))
    assert [t.name for t in made] == ["load_skill"]
