"""Allowlisted commands as tools: `run_tests(target)` and `run_command(name)`, sandboxed.

Owns the mapping from a name the model picks (an enum in the tool's schema) to a fixed
argument vector from configuration, and the result the model reads: exit code,
duration, excerpts of stdout and stderr, failing tests and failure lines, the
protections that were in force and the files the workspace copy left out. The model
never supplies an argument, path or flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, ToolFailed
from handrail.shaping.excerpt import Excerpt
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel, SideEffect
from handrail.tools.sandbox import (
    ISOLATION,
    LeftOut,
    Protection,
    Sandbox,
    SandboxResult,
    SandboxUnavailableError,
)

__all__ = ["CommandsConfig", "command_report", "command_timeout", "command_tools"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_MAX_ARGS = 256
_CLEANUP_MARGIN_S = 30.0
"""Time the tool allows beyond the command's own timeout: the copy and the cleanup."""
_LEFT_OUT_SHOWN = 20
"""Paths of each kind of left-out file the model is shown."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandsConfig:
    """The fixed commands a model may run by name.

    `tests` maps a test target name to its argument vector (for `run_tests`),
    `commands` a command name to its argument vector (for `run_command`). Names are
    1-64 chars of letters, digits and `_.:-`; a vector is a non-empty list of strings.
    """

    tests: Mapping[str, Sequence[str]] = field(default_factory=dict)
    commands: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """After construction both hold tuples: `Mapping[str, tuple[str, ...]]`."""
    timeout_seconds: float | None = None
    """Wall time of one run; None uses the sandbox's configured limit."""
    permissions: tuple[str, ...] = ()
    """Permissions a principal needs to see and call the tools."""

    def __post_init__(self) -> None:
        for label in ("tests", "commands"):
            table: Mapping[str, Sequence[str]] = getattr(self, label)
            object.__setattr__(self, label, MappingProxyType(_checked(label, table)))
        object.__setattr__(self, "permissions", tuple(self.permissions))
        if not (self.tests or self.commands):
            raise ConfigurationError("CommandsConfig needs at least one test target or command")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise ConfigurationError("CommandsConfig.timeout_seconds must be positive")


def _checked(label: str, table: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    checked: dict[str, tuple[str, ...]] = {}
    for name, argv in table.items():
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise ConfigurationError(f"{label}: name {name!r} must match {_NAME.pattern}")
        if isinstance(argv, str | bytes) or not argv or len(argv) > _MAX_ARGS:
            raise ConfigurationError(
                f"{label}[{name!r}] must be a non-empty list of at most {_MAX_ARGS} arguments",
            )
        if not all(isinstance(arg, str) and "\0" not in arg for arg in argv) or not argv[0]:
            raise ConfigurationError(f"{label}[{name!r}] holds an argument that is not text")
        checked[name] = tuple(argv)
    return checked


def command_tools(
    config: CommandsConfig,
    sandbox: Sandbox,
    *,
    namespace: str = "sandbox",
) -> list[Tool]:
    """`run_tests` (when tests are configured) and `run_command` (when commands are).

    Both read: the command runs in a disposable copy of the workspace, so they are L1
    with no side effect; what the command prints is untrusted.
    """
    made: list[Tool] = []
    if config.tests:
        made.append(
            _command_tool(
                config,
                sandbox,
                name=f"{namespace}.run_tests",
                parameter="target",
                table=config.tests,
                summary="Run one of the project's configured test suites and report the exit "
                "code, the failing tests, failure lines and excerpts of the output.",
            ),
        )
    if config.commands:
        made.append(
            _command_tool(
                config,
                sandbox,
                name=f"{namespace}.run_command",
                parameter="name",
                table=config.commands,
                summary="Run one of the project's configured commands (build, lint, ...) and "
                "report its exit code, failure lines and excerpts of its output.",
            ),
        )
    return made


def _command_tool(
    config: CommandsConfig,
    sandbox: Sandbox,
    *,
    name: str,
    parameter: str,
    table: Mapping[str, Sequence[str]],
    summary: str,
) -> Tool:
    names = sorted(table)
    description = (
        f"{summary} It runs in a sandbox on a throwaway copy of the workspace: changes "
        f"it makes are discarded. Choices: {', '.join(names)}."
    )
    schema = {
        "type": "object",
        "properties": {
            parameter: {
                "type": "string",
                "enum": names,
                "description": "Which configured entry to run.",
            },
        },
        "required": [parameter],
        "additionalProperties": False,
    }
    configured = config.timeout_seconds or sandbox.config.limits.timeout_seconds

    async def run(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, object]:
        chosen = arguments[parameter]
        argv = table.get(chosen)
        if argv is None:  # the schema's enum already refused it; this is a second lock
            raise ToolFailed(f"{chosen!r} is not one of the configured entries.")
        try:
            result = await sandbox.run(argv, timeout=command_timeout(configured, ctx.remaining()))
        except SandboxUnavailableError:
            raise ToolFailed(
                "Commands are disabled: this host cannot isolate them as required.",
            ) from None
        return command_report(chosen, result)

    return Tool.from_json_schema(
        name=name,
        description=description,
        input_schema=schema,
        fn=run,
        risk=RiskLevel.L1_INTERNAL_READ,
        side_effect=SideEffect.NONE,
        permissions=config.permissions,
        timeout=configured + _CLEANUP_MARGIN_S,
        results=ResultPolicy(trust=Trust.UNTRUSTED),
    )


def command_timeout(configured: float, remaining: float) -> float:
    """The configured timeout, shortened to leave the call time to clean up."""
    room = remaining - min(_CLEANUP_MARGIN_S, remaining / 5)
    return max(0.1, min(configured, room))


def command_report(name: str, result: SandboxResult) -> dict[str, object]:
    """What the model reads of one sandboxed run: exit, duration, excerpts, failures."""
    failures = [f"stdout {line}" for line in result.stdout.failures]
    failures += [f"stderr {line}" for line in result.stderr.failures]
    failed = dict.fromkeys([*result.stdout.failed_tests, *result.stderr.failed_tests])
    report: dict[str, object] = {
        "name": name,
        "succeeded": result.succeeded,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "timed_out": result.timed_out,
        "killed_for": None if result.killed_for is None else str(result.killed_for),
        "duration_seconds": round(result.duration, 3),
        "failed_tests": list(failed),
        "failures": failures,
        "stdout": _stream(result.stdout, result.stdout_bytes),
        "stderr": _stream(result.stderr, result.stderr_bytes),
        "protections": sorted(result.protections),
        "missing_protections": sorted(result.missing),
    }
    left_out = _left_out(result.left_out)
    if left_out:
        report["left_out"] = left_out
    warning = _warning(result.missing)
    if warning:
        report["warning"] = warning
    return report


def _left_out(left: LeftOut) -> dict[str, object] | None:
    """What the workspace copy left out, for the model: why a file may seem missing."""
    if not left.paths:
        return None
    kinds = {
        "hard_links": left.hard_links,
        "unreadable": left.unreadable,
        "special": left.special,
    }
    shown: dict[str, object] = {
        kind: list(paths[:_LEFT_OUT_SHOWN]) for kind, paths in kinds.items() if paths
    }
    shown["truncated"] = left.truncated or any(len(p) > _LEFT_OUT_SHOWN for p in kinds.values())
    shown["note"] = (
        "These workspace files were not copied into the sandbox: files with several hard "
        "links, files the sandbox user may not read, and sockets, pipes or devices."
    )
    return shown


def _stream(excerpt: Excerpt, total_bytes: int) -> dict[str, object]:
    return {
        "text": excerpt.text,
        "total_bytes": total_bytes,
        "total_lines": excerpt.total_lines,
        "omitted_lines": excerpt.omitted_lines,
        "truncated": excerpt.truncated or total_bytes > len(excerpt.text.encode()),
    }


def _warning(missing: frozenset[Protection]) -> str | None:
    if not missing:
        return None
    parts = []
    if missing & ISOLATION:
        parts.append(
            "The command was not isolated (no bubblewrap on this host): it could reach the "
            "network, read host files and see host processes.",
        )
    rest = sorted(missing - ISOLATION)
    if rest:
        parts.append(f"Not in force on this host: {', '.join(rest)}.")
    return " ".join(parts)
