"""Attacks on search_text through a real Gate and a real ripgrep.

A pattern or path that looks like a flag stays a pattern or a path; nothing outside the
workspace is ever read into a result (symbolic links, hard links, `..`, absolute
paths, a hostile ripgrep config in the environment); catastrophic regexes and glob
bombs end well within the timeout or are refused with a structured error.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from handrail import Envelope, ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import SearchConfig, search_tools

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
CANARY = "CANARY-7f3a"
TOOL = "workspace.search_text"
ATTACKER = Principal(user_id="mallory", tenant_id="t1")

FLAG_PATTERNS = [
    "--pre=sh",
    "--pre",
    "-e",
    "--files",
    "-L",
    "--follow",
    "--config",
    "--regexp=x",
    "--",
    "-",
    "-uuu",
    "--no-ignore",
    "$(touch pwned)",
    "`touch pwned`",
    ";rm -rf ~",
    "| cat /etc/passwd",
    "--hidden --follow",
]

Search = Callable[..., Awaitable[tuple[Envelope, dict[str, Any]]]]
WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]


@pytest.fixture
def rg() -> str:
    """The ripgrep binary; skips without one, fails instead under CI=true."""
    if RG is None:
        reason = "ripgrep (rg) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return RG


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The workspace: flags.txt holds every flag-like pattern; outside/ holds canaries."""
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = "".join(f"{CANARY} {pattern}\n" for pattern in FLAG_PATTERNS)
    (outside / "secret.txt").write_text(canary)
    (outside / ".hidden-secret.txt").write_text(canary)
    (outside / "hard.txt").write_text(canary)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "flags.txt").write_text("".join(f"{p}\n" for p in FLAG_PATTERNS))
    (workspace / "dir-link").symlink_to(outside)
    (workspace / "file-link.txt").symlink_to(outside / "secret.txt")
    (workspace / "parent-link").symlink_to(tmp_path)
    os.link(outside / "hard.txt", workspace / "hard.txt")
    return workspace


def _gate(rg: str, root: Path, **config: Any) -> Gate:
    registry = Registry()
    for item in search_tools(Workspace(root), SearchConfig(rg=rg, **config)):
        registry.register(item)
    return Gate(
        registry,
        audit=MemoryAuditSink(),
        clock=FixedClock(),
        new_id=sequential_ids(),
        max_result_chars=6_000,
    )


@pytest.fixture
def search(rg: str, root: Path, wire: WireCheck, tmp_path: Path) -> Search:
    """`await search(arguments, **config)`: one call through a fresh gate; checked envelope."""

    async def call(arguments: dict[str, Any], **config: Any) -> tuple[Envelope, dict[str, Any]]:
        gate = _gate(rg, root, **config)
        request = ToolCall(id="call_search", name=TOOL, arguments=json.dumps(arguments))
        envelope = await gate.handle(request, ATTACKER)
        shown = wire(envelope, request)
        text = envelope.to_json()
        assert CANARY not in text
        assert str(tmp_path) not in text
        return envelope, shown

    return call


def _paths(envelope: Envelope) -> list[tuple[str, int]]:
    return [(match["path"], match["line"]) for match in envelope.data["matches"]]


# --- patterns that look like flags ----------------------------------------------------------


@pytest.mark.parametrize("pattern", FLAG_PATTERNS)
async def test_a_flag_like_pattern_is_only_ever_a_pattern(
    search: Search,
    root: Path,
    pattern: str,
) -> None:
    envelope, _ = await search({"pattern": pattern, "case": "sensitive"})
    assert envelope.status is Status.OK
    expected = [
        ("flags.txt", n) for n, line in enumerate(FLAG_PATTERNS, start=1) if pattern in line
    ]
    assert _paths(envelope) == expected
    assert not (root / "pwned").exists()
    assert not (root.parent / "pwned").exists()


@pytest.mark.parametrize("pattern", ["-e", "--pre=sh", "-L", "--files"])
async def test_a_flag_like_regex_is_only_ever_a_regex(search: Search, pattern: str) -> None:
    envelope, _ = await search({"pattern": f"^{pattern}$", "regex": True})
    assert envelope.status is Status.OK
    assert _paths(envelope) == [("flags.txt", FLAG_PATTERNS.index(pattern) + 1)]


@pytest.mark.parametrize("pattern", ["a\x00b", "a\nb", "a\rb", ""])
async def test_a_pattern_with_nul_or_a_line_break_is_refused(search: Search, pattern: str) -> None:
    envelope, shown = await search({"pattern": pattern})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert shown["retryable"] is True


async def test_a_hostile_ripgrep_config_in_the_environment_is_ignored(
    search: Search,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "ripgreprc"
    config.write_text("--follow\n--hidden\n--no-ignore\n--pre=/bin/cat\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    envelope, _ = await search({"pattern": "--files"})
    assert _paths(envelope) == [("flags.txt", FLAG_PATTERNS.index("--files") + 1)]


# --- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../",
        "..",
        "/etc",
        "/etc/passwd",
        "a/../../outside",
        "~/.ssh",
        "..\\outside",
        "x\x00y",
        "dir-link",
        "dir-link/secret.txt",
        "file-link.txt",
        "parent-link/outside",
        "hard.txt",
        "flags.txt\n--follow",
    ],
)
async def test_a_path_that_leaves_the_workspace_is_refused(search: Search, path: str) -> None:
    envelope, shown = await search({"pattern": CANARY, "paths": [path]})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert CANARY not in json.dumps(shown)


@pytest.mark.parametrize("path", ["--pre=sh", "-L", "--follow", "-e"])
async def test_a_flag_like_path_that_does_not_exist_is_not_found(
    search: Search,
    path: str,
) -> None:
    envelope, _ = await search({"pattern": "x", "paths": [path]})
    assert envelope.error_type is ErrorCode.NOT_FOUND


async def test_a_flag_like_path_that_exists_is_searched_as_a_path(
    search: Search,
    root: Path,
) -> None:
    (root / "--pre=sh").mkdir()
    (root / "--pre=sh" / "a.txt").write_text("inside\n")
    (root / "-L").write_text("inside\n")
    envelope, _ = await search({"pattern": "inside", "paths": ["-L", "--pre=sh"]})
    assert sorted(_paths(envelope)) == [("--pre=sh/a.txt", 1), ("-L", 1)]


@pytest.mark.parametrize(
    "arguments",
    [
        {"pattern": CANARY},
        {"pattern": CANARY, "include": ["*"]},
        {"pattern": CANARY, "include": ["*.txt", ".*"]},
        {"pattern": CANARY, "regex": True, "case": "insensitive", "context": 5},
        {"pattern": "CANARY-\\w+", "regex": True},
    ],
)
async def test_nothing_outside_the_workspace_ever_appears(
    search: Search,
    arguments: dict[str, Any],
) -> None:
    envelope, _ = await search(arguments)
    assert envelope.status in {Status.OK, Status.EMPTY}
    assert envelope.data["matches"] == []
    assert envelope.data["refused_files"] == 1  # the hard link, read but never shown


@pytest.fixture
def git_internals(root: Path) -> Path:
    """A repository's internals holding a canary, and an ignore file whitelisting them."""
    (root / ".git" / "refs").mkdir(parents=True)
    (root / ".git" / "config").write_text(f"[remote]\n url = https://{CANARY}@example.com\n")
    (root / ".git" / "refs" / "HEAD").write_text(f"{CANARY}\n")
    (root / ".ignore").write_text("!.git\n!.git/**\n")
    return root


@pytest.mark.parametrize(
    "arguments",
    [
        {"pattern": CANARY},
        {"pattern": CANARY, "include": ["config", "*"]},
        {"pattern": CANARY, "include": [".*", "HEAD"], "case": "insensitive"},
    ],
)
async def test_git_internals_are_never_searched_even_when_an_ignore_file_whitelists_them(
    search: Search,
    git_internals: Path,
    arguments: dict[str, Any],
) -> None:
    envelope, _ = await search(arguments)
    assert git_internals.joinpath(".git").is_dir()
    assert envelope.status in {Status.OK, Status.EMPTY}
    assert envelope.data["matches"] == []


@pytest.mark.parametrize("path", [".git", ".git/config", ".GIT/refs", "./.git/refs/HEAD"])
async def test_a_path_into_git_internals_is_refused_as_read_file_refuses_it(
    search: Search,
    git_internals: Path,
    path: str,
) -> None:
    envelope, _ = await search({"pattern": CANARY, "paths": [path]})
    assert git_internals.joinpath(".git").is_dir()
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    "glob",
    ["../*", "/etc/*", "**/*", "dir-link/*", "a:b", "!*.txt", "x\x00"],
)
async def test_a_glob_that_names_a_path_is_refused(search: Search, glob: str) -> None:
    envelope, _ = await search({"pattern": "x", "include": [glob]})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


# --- patterns and globs that could run for ever ------------------------------------------------


@pytest.fixture
def long_lines(root: Path) -> Path:
    body = ("a" * 100_000 + "\n") * 20 + ("x" * 100_000 + "\n") * 20 + "ab " * 30_000 + "\n"
    (root / "long.txt").write_text(body)
    return root


@pytest.mark.usefixtures("long_lines")
@pytest.mark.parametrize(
    "pattern",
    [
        "(a+)+$",
        "(a|aa)*b",
        "(?:x*)*y",
        "(\\w+\\s?)*\\d",
        "(a*)*(b*)*(c*)*z",
        "((a|b)*)*c",
        "(.*a){20}",
        "a{1,1000}a{1,1000}z",
        "(?i)(\\p{L}|\\p{N})+!",
    ],
)
async def test_a_catastrophic_regex_ends_within_its_time(search: Search, pattern: str) -> None:
    envelope, _ = await search({"pattern": pattern, "regex": True}, timeout=30)
    assert envelope.ok
    assert envelope.data["timed_out"] is False
    assert envelope.data["complete"] is True


@pytest.mark.usefixtures("long_lines")
@pytest.mark.parametrize("pattern", ["\\p{L}{1000}{1000}", "\\w{1000}", "(\\w{100}){100}"])
async def test_a_regex_too_large_to_compile_is_refused(search: Search, pattern: str) -> None:
    envelope, shown = await search({"pattern": pattern, "regex": True})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "too large" in shown["summary"]


async def test_a_huge_alternation_is_refused_by_the_schema_by_default(search: Search) -> None:
    alternation = "|".join(f"w{n:04d}" for n in range(2000))
    envelope, _ = await search({"pattern": alternation, "regex": True})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.usefixtures("long_lines")
async def test_a_huge_alternation_allowed_by_config_ends_or_is_refused(search: Search) -> None:
    alternation = "|".join(f"w{n:04d}" for n in range(2000))
    assert len(alternation) > 9_000
    envelope, _ = await search(
        {"pattern": alternation, "regex": True},
        max_pattern_chars=20_000,
        timeout=30,
    )
    if envelope.ok:
        assert envelope.data["timed_out"] is False
    else:
        assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


@pytest.mark.usefixtures("long_lines")
@pytest.mark.parametrize(
    "globs",
    [
        ["*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"],
        ["{a,b,c,d,e,f,g,h,i,j}{a,b,c,d,e,f,g,h,i,j}{a,b,c,d,e,f,g,h,i,j}{a,b,c,d,e,f,g,h}*"],
        ["*" * 100],
        ["[a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z][a-z]*"] * 8,
        ["?" * 100],
    ],
)
async def test_a_glob_bomb_ends_within_its_time(search: Search, globs: list[str]) -> None:
    envelope, _ = await search({"pattern": "a", "include": globs}, timeout=30)
    assert envelope.ok
    assert envelope.data["timed_out"] is False


@pytest.mark.parametrize("glob", ["[", "{a,{b}}", "[z-a]"])
async def test_a_glob_ripgrep_cannot_parse_is_refused(search: Search, glob: str) -> None:
    envelope, _ = await search({"pattern": "x", "include": [glob]})
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


# --- output bombs ---------------------------------------------------------------------------------


async def test_a_flood_of_matches_is_cut_to_a_bounded_page(search: Search, root: Path) -> None:
    (root / "flood.txt").write_text("hit\n" * 200_000)
    (root / "wide.txt").write_text("hit" * 2_000_000 + "\n")
    envelope, shown = await search({"pattern": "hit", "context": 5})
    assert envelope.ok
    data = envelope.data
    assert data["truncated"] is True
    assert data["total_matches"] > 200
    assert len(shown["data"]["matches"]) <= 200
