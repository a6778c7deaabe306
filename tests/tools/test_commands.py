"""run_tests and run_command through a real Gate, running real programs in the sandbox.

The pytest project under test is written into tmp_path and run with this interpreter,
which is made visible (read-only) inside the sandbox. Tests that need bubblewrap skip
where it cannot run, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from handrail import Gate, Principal, Registry, ToolCall
from handrail.declare.definition import BoundArguments, Tool
from handrail.envelope import Envelope, Status, Trust
from handrail.errors import ConfigurationError, ErrorCode, ToolFailed
from handrail.spec import RiskLevel, SideEffect
from handrail.testing import FixedClock
from handrail.tools.commands import (
    CommandsConfig,
    _left_out,
    _warning,
    command_timeout,
    command_tools,
)
from handrail.tools.sandbox import (
    ISOLATION,
    LeftOut,
    Protection,
    Sandbox,
    SandboxConfig,
    SandboxLimits,
)

pytestmark = pytest.mark.anyio

READER = Principal(user_id="u", tenant_id="t1", permissions=frozenset({"commands.run"}))

TESTS = """
def test_passes():
    assert 1 + 1 == 2


def test_fails():
    assert 1 + 1 == 3
"""

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_demo.py"]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "test_demo.py").write_text(TESTS)
    (root / "notes.txt").write_text("hello from the workspace\n")
    return root


def _sandbox(project: Path, tmp_path: Path, **options: Any) -> Sandbox:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    interpreter = {Path(sys.prefix), Path(sys.base_prefix)}
    options.setdefault("read_only_paths", tuple(sorted(interpreter)))
    options.setdefault("limits", SandboxLimits(timeout_seconds=60))
    options.setdefault("env", {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return Sandbox(SandboxConfig(workspace=project, scratch_dir=scratch, **options))


async def _isolating(sandbox: Sandbox) -> Sandbox:
    if shutil.which("bwrap") is None:
        _unavailable("bubblewrap (bwrap) is not installed")
    if Protection.NAMESPACES not in await sandbox.protections():
        _unavailable(f"bubblewrap cannot run here: {sandbox.problem}")
    return sandbox


def _gate(config: CommandsConfig, sandbox: Sandbox, **options: Any) -> Gate:
    registry = Registry()
    for item in command_tools(config, sandbox, **options):
        registry.register(item)
    return Gate(registry)


async def _call(gate: Gate, name: str, arguments: dict[str, Any]) -> Envelope:
    return await gate.handle(ToolCall(id="c1", name=name, arguments=json.dumps(arguments)), READER)


CONFIG = CommandsConfig(
    tests={"unit": PYTEST, "all": [*PYTEST[:-1], "."]},
    commands={"hello": ["cat", "notes.txt"], "slow": ["sleep", "30"], "fail": ["false"]},
    permissions=("commands.run",),
)


# --- the tools -----------------------------------------------------------------------------


def test_each_tool_offers_exactly_the_configured_names(project: Path, tmp_path: Path) -> None:
    run_tests, run_command = command_tools(CONFIG, _sandbox(project, tmp_path))
    assert run_tests.name == "sandbox.run_tests"
    assert run_command.name == "sandbox.run_command"
    assert run_tests.spec.input_schema == {
        "type": "object",
        "properties": {
            "target": {
                "type": "string",
                "enum": ["all", "unit"],
                "description": "Which configured entry to run.",
            },
        },
        "required": ["target"],
        "additionalProperties": False,
    }
    assert run_command.spec.input_schema["properties"]["name"]["enum"] == ["fail", "hello", "slow"]
    assert "Choices: fail, hello, slow." in run_command.spec.description
    assert "/" not in run_command.spec.description  # no argument vector, no host path


def test_running_a_configured_command_is_a_sandboxed_read(project: Path, tmp_path: Path) -> None:
    for item in command_tools(CONFIG, _sandbox(project, tmp_path), namespace="ci"):
        assert item.name.startswith("ci.")
        assert item.spec.risk is RiskLevel.L1_INTERNAL_READ
        assert item.spec.side_effect is SideEffect.NONE
        assert item.spec.read_only
        assert item.spec.permissions == {"commands.run"}
        assert item.spec.results.trust is Trust.UNTRUSTED
        assert item.spec.timeout == 60 + 30


def test_only_the_configured_kinds_of_tools_are_made(project: Path, tmp_path: Path) -> None:
    sandbox = _sandbox(project, tmp_path)
    only_commands = command_tools(CommandsConfig(commands={"a": ["true"]}), sandbox)
    assert [t.name for t in only_commands] == ["sandbox.run_command"]
    only_tests = command_tools(CommandsConfig(tests={"a": ["true"]}, timeout_seconds=5), sandbox)
    assert [t.name for t in only_tests] == ["sandbox.run_tests"]
    assert only_tests[0].spec.timeout == 5 + 30


@pytest.mark.parametrize(
    "arguments",
    [
        {"target": "nope"},
        {"target": "unit; rm -rf /"},
        {"target": "--help"},
        {"target": "UNIT"},
        {"target": ["unit"]},
        {},
        {"target": "unit", "argv": ["sh", "-c", "id"]},
        {"target": "unit", "extra_args": "-k test_passes"},
    ],
)
async def test_anything_but_a_configured_name_is_refused_before_anything_runs(
    project: Path,
    tmp_path: Path,
    arguments: dict[str, Any],
) -> None:
    gate = _gate(CONFIG, _sandbox(project, tmp_path))
    envelope = await _call(gate, "sandbox.run_tests", arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert not (tmp_path / "scratch").exists() or not list((tmp_path / "scratch").iterdir())


async def test_a_name_that_slips_past_the_schema_still_runs_nothing(
    project: Path,
    tmp_path: Path,
) -> None:
    run_tests = command_tools(CONFIG, _sandbox(project, tmp_path))[0]
    ctx = _context()
    with pytest.raises(ToolFailed):
        await run_tests.invoke(BoundArguments({"target": "x"}, {"target": "x"}), ctx)


def _context() -> Any:
    from handrail.context import ToolContext  # noqa: PLC0415 - only this helper builds one

    return ToolContext(principal=READER, call_id="c", tool="t", deadline=1e9, clock=FixedClock())


async def test_run_tests_names_the_failing_test_and_the_exit_code(
    project: Path,
    tmp_path: Path,
) -> None:
    sandbox = await _isolating(_sandbox(project, tmp_path))
    gate = _gate(CONFIG, sandbox)
    envelope = await _call(gate, "sandbox.run_tests", {"target": "unit"})
    assert envelope.status is Status.OK, envelope
    assert envelope.trust is Trust.UNTRUSTED
    data = envelope.data
    assert data["name"] == "unit"
    assert data["exit_code"] == 1
    assert data["succeeded"] is False
    assert data["timed_out"] is False
    assert data["killed_for"] is None
    assert data["failed_tests"] == ["test_demo.py::test_fails"]
    assert any("FAILED test_demo.py::test_fails" in line for line in data["failures"])
    assert all(line.startswith(("stdout L", "stderr L")) for line in data["failures"])
    assert "1 failed, 1 passed" in data["stdout"]["text"]
    assert data["stdout"]["total_bytes"] > 0
    assert data["stdout"]["truncated"] is False
    assert set(data["protections"]) >= {str(p) for p in ISOLATION}
    assert data["missing_protections"] == []
    assert "warning" not in data
    assert data["duration_seconds"] >= 0
    assert not (project / ".pytest_cache").exists()
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_run_tests_without_bubblewrap_says_what_protection_is_lost(
    project: Path,
    tmp_path: Path,
) -> None:
    # Without bubblewrap the unprivileged user cannot reach this interpreter (under /root
    # here), so the suite is one that prints what pytest prints.
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    script = "echo 'FAILED test_demo.py::test_fails - assert 2 == 3'; exit 1"
    config = CommandsConfig(tests={"unit": ["sh", "-c", script]})
    envelope = await _call(_gate(config, sandbox), "sandbox.run_tests", {"target": "unit"})
    data = envelope.data
    assert data["exit_code"] == 1
    assert data["failed_tests"] == ["test_demo.py::test_fails"]
    assert set(data["missing_protections"]) >= {str(p) for p in ISOLATION}
    assert data["warning"].startswith("The command was not isolated")


async def test_run_command_reports_a_success_with_its_output(project: Path, tmp_path: Path) -> None:
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    envelope = await _call(_gate(CONFIG, sandbox), "sandbox.run_command", {"name": "hello"})
    data = envelope.data
    assert data["succeeded"] is True
    assert data["exit_code"] == 0
    assert data["stdout"] == {
        "text": "hello from the workspace\n",
        "total_bytes": 25,
        "total_lines": 1,
        "omitted_lines": 0,
        "truncated": False,
    }
    assert data["stderr"]["total_bytes"] == 0
    assert data["failed_tests"] == []
    assert data["failures"] == []
    assert "left_out" not in data


async def test_the_model_is_told_which_files_the_copy_left_out_and_why(
    project: Path,
    tmp_path: Path,
) -> None:
    (tmp_path / "elsewhere.txt").write_text("another name for this file\n")
    os.link(tmp_path / "elsewhere.txt", project / "linked.txt")
    os.mkfifo(project / "pipe")
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    envelope = await _call(_gate(CONFIG, sandbox), "sandbox.run_command", {"name": "hello"})
    left_out = envelope.data["left_out"]
    assert left_out["hard_links"] == ["linked.txt"]
    assert left_out["special"] == ["pipe"]
    assert "unreadable" not in left_out
    assert left_out["truncated"] is False
    assert "hard links" in left_out["note"]


def test_a_long_list_of_left_out_files_is_cut_and_says_so() -> None:
    many = tuple(f"f{n:03d}" for n in range(30))
    shown = _left_out(LeftOut(unreadable=many))
    assert shown is not None
    assert shown["unreadable"] == list(many[:20])
    assert shown["truncated"] is True
    assert _left_out(LeftOut()) is None


async def test_a_command_past_its_timeout_is_reported_as_timed_out(
    project: Path,
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    config = CommandsConfig(commands={"slow": ["sleep", "30"]}, timeout_seconds=0.3)
    envelope = await _call(_gate(config, sandbox), "sandbox.run_command", {"name": "slow"})
    data = envelope.data
    assert data["timed_out"] is True
    assert data["killed_for"] == "timeout"
    assert data["exit_code"] is None
    assert data["signal"] == 9
    assert data["succeeded"] is False


async def test_limits_the_host_cannot_give_are_named_in_the_warning(
    project: Path,
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False, cgroups=False, user=None)
    envelope = await _call(_gate(CONFIG, sandbox), "sandbox.run_command", {"name": "fail"})
    data = envelope.data
    assert data["exit_code"] == 1
    if os.geteuid() == 0:
        assert "unprivileged-user" in data["missing_protections"]
        assert (
            "Not in force on this host: disk-limit, memory-limit, process-limit, unprivileged-user."
            in (data["warning"])
        )


async def test_a_host_that_cannot_isolate_refuses_when_isolation_is_required(
    project: Path,
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(project, tmp_path, bwrap_path=tmp_path / "none", require_isolation=True)
    envelope = await _call(_gate(CONFIG, sandbox), "sandbox.run_command", {"name": "hello"})
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert envelope.summary == "Commands are disabled: this host cannot isolate them as required."
    assert str(tmp_path) not in envelope.summary


async def test_long_output_is_marked_truncated(project: Path, tmp_path: Path) -> None:
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    config = CommandsConfig(commands={"many": ["seq", "1", "100000"]})
    envelope = await _call(_gate(config, sandbox), "sandbox.run_command", {"name": "many"})
    stdout = envelope.data["stdout"]
    assert stdout["truncated"] is True
    assert stdout["total_lines"] == 100000
    assert stdout["omitted_lines"] > 0


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"tests": {}, "commands": {}},
        {"tests": {"": ["true"]}},
        {"tests": {"has space": ["true"]}},
        {"tests": {"-flag": ["true"]}},
        {"tests": {"x" * 65: ["true"]}},
        {"commands": {"a": []}},
        {"commands": {"a": "true"}},
        {"commands": {"a": [""]}},
        {"commands": {"a": ["tr\0ue"]}},
        {"commands": {"a": ["true", 1]}},
        {"commands": {"a": ["x"] * 257}},
        {"commands": {"a": ["true"]}, "timeout_seconds": 0},
    ],
)
def test_a_bad_allowlist_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        CommandsConfig(**options)


def test_the_allowlist_is_frozen_after_construction() -> None:
    source = {"unit": ["pytest", "-q"]}
    config = CommandsConfig(tests=source, permissions=["p"])  # type: ignore[arg-type]
    source["unit"].append("--evil")
    assert config.tests["unit"] == ("pytest", "-q")
    assert config.permissions == ("p",)
    with pytest.raises(TypeError):
        config.tests["other"] = ("x",)  # type: ignore[index]


@pytest.mark.parametrize(
    ("configured", "remaining", "expected"),
    [(60.0, 1000.0, 60.0), (60.0, 30.0, 24.0), (10.0, 30.0, 10.0), (60.0, 0.0, 0.1)],
)
def test_the_run_leaves_the_call_time_to_clean_up(
    configured: float,
    remaining: float,
    expected: float,
) -> None:
    assert command_timeout(configured, remaining) == pytest.approx(expected)


def test_command_tools_are_ordinary_tools(project: Path, tmp_path: Path) -> None:
    made = command_tools(CONFIG, _sandbox(project, tmp_path))
    assert all(isinstance(item, Tool) for item in made)


def test_a_warning_names_only_what_is_missing() -> None:
    assert _warning(frozenset()) is None
    only_isolation = _warning(ISOLATION)
    assert only_isolation is not None
    assert only_isolation.startswith("The command was not isolated")
    assert "Not in force" not in only_isolation
    assert _warning(frozenset({Protection.MEMORY_LIMIT})) == (
        "Not in force on this host: memory-limit."
    )


async def test_a_short_request_deadline_ends_the_command_in_time_to_report_it(
    project: Path,
    tmp_path: Path,
) -> None:
    sandbox = _sandbox(project, tmp_path, use_bubblewrap=False)
    gate = _gate(CONFIG, sandbox)
    call = ToolCall(id="c1", name="sandbox.run_command", arguments='{"name": "slow"}')
    envelope = await gate.handle(call, READER, timeout=1.0)
    assert envelope.status is Status.OK
    assert envelope.data["timed_out"] is True
    assert list((tmp_path / "scratch").iterdir()) == []
