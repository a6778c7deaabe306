"""search_text over a real ripgrep: matching, scope, ignore files, paging, bounds, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _fifo import read_line
from handrail import ErrorCode, Gate, Principal, Registry, RiskLevel, SideEffect, Status, ToolCall
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, InvalidArgument, NotFound, ToolFailed
from handrail.shaping.budget import json_size
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.tools._sandbox_confine import landlock_usable
from handrail.tools.workspace._rg_json import (
    Lines,
    Long,
    elapsed_ms,
    json_string_prefix,
    line_text,
    long_message,
    message,
    path_parts,
    plain_files,
    run_matches,
)
from handrail.tools.workspace._rg_process import rg_refusal
from handrail.tools.workspace._search_pages import Collect, Page, Stream
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import (
    SearchConfig,
    SearchResult,
    TextSearch,
    search_tools,
)

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
SLEEP = shutil.which("sleep")


@pytest.fixture
def rg() -> str:
    """The ripgrep binary; skips without one, fails instead under CI=true."""
    if RG is None:
        reason = "ripgrep (rg) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return RG


Make = Callable[..., TextSearch]


@pytest.fixture
def make(rg: str, tmp_path: Path) -> Make:
    """`make(files, **config)`: a TextSearch over tmp_path/ws holding `files`."""

    def build(files: dict[str, str | bytes] | None = None, **config: Any) -> TextSearch:
        root = tmp_path / "ws"
        root.mkdir(exist_ok=True)
        _write(root, files or {})
        return TextSearch(Workspace(root), SearchConfig(rg=rg, **config))

    return build


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _where(result: SearchResult) -> list[tuple[str, int | None]]:
    return [(match.path, match.line) for match in result.matches]


# --- matching --------------------------------------------------------------------------------


async def test_a_pattern_is_a_fixed_string_by_default(make: Make) -> None:
    search = make({"a.txt": "call a.b(x)\ncall axb(x)\n"})
    result = await search.search("a.b(")
    assert _where(result) == [("a.txt", 1)]
    assert result.matches[0].ranges == ((5, 9),)
    assert result.complete
    assert not result.truncated
    assert result.next_skip is None


async def test_a_regex_is_used_only_when_asked_for(make: Make) -> None:
    search = make({"a.txt": "call a.b(x)\ncall axb(x)\n"})
    result = await search.search(r"a.b\(", regex=True)
    assert _where(result) == [("a.txt", 1), ("a.txt", 2)]


async def test_an_invalid_regex_is_refused_with_the_reason(make: Make) -> None:
    search = make({"a.txt": "x\n"})
    with pytest.raises(InvalidArgument) as caught:
        await search.search("(unclosed", regex=True)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert "unclosed group" in caught.value.message


async def test_a_regex_matching_a_line_break_is_refused(make: Make) -> None:
    search = make({"a.txt": "x\n"})
    with pytest.raises(InvalidArgument, match="line break"):
        await search.search(r"a\nb", regex=True)


@pytest.mark.parametrize(
    ("pattern", "case", "lines"),
    [
        ("needle", "smart", [1, 2, 3]),
        ("Needle", "smart", [2]),
        ("needle", "sensitive", [1]),
        ("NEEDLE", "insensitive", [1, 2, 3]),
    ],
)
async def test_case_modes_follow_ripgrep(
    make: Make,
    pattern: str,
    case: str,
    lines: list[int],
) -> None:
    search = make({"a.txt": "needle\nNeedle\nNEEDLE\n"})
    result = await search.search(pattern, case=case)  # type: ignore[arg-type]
    assert [match.line for match in result.matches] == lines


async def test_context_lines_come_with_their_match_and_are_shown_once(make: Make) -> None:
    text = "".join(f"{word}\n" for word in ["a", "b", "HIT", "c", "HIT", "d", "e", "f", "HIT"])
    search = make({"a.txt": text})
    result = await search.search("HIT", context=1)
    first, second, third = result.matches
    assert [(c.line, c.text) for c in first.before] == [(2, "b")]
    assert [(c.line, c.text) for c in first.after] == [(4, "c")]
    assert second.before == ()  # line 4 is shown once, after the first match
    assert [(c.line, c.text) for c in second.after] == [(6, "d")]
    assert [(c.line, c.text) for c in third.before] == [(8, "f")]
    assert third.after == ()


async def test_context_of_a_skipped_match_is_not_shown_before_the_next(make: Make) -> None:
    text = "".join(f"{word}\n" for word in ["a", "HIT", "b", "c", "d", "e", "HIT", "f"])
    search = make({"a.txt": text})
    result = await search.search("HIT", context=2, skip=1)
    (match,) = result.matches
    assert match.line == 7
    assert [c.line for c in match.before] == [5, 6]
    assert [c.line for c in match.after] == [8]


# --- scope ------------------------------------------------------------------------------------


async def test_paths_limit_the_search_and_nested_paths_count_once(make: Make) -> None:
    search = make(
        {"src/a.py": "hit\n", "src/deep/b.py": "hit\n", "docs/c.md": "hit\n", "d.txt": "hit\n"},
    )
    result = await search.search("hit", paths=["src", "src/deep", "./src/deep/b.py"])
    assert _where(result) == [("src/a.py", 1), ("src/deep/b.py", 1)]
    single = await search.search("hit", paths=["docs/c.md"])
    assert _where(single) == [("docs/c.md", 1)]
    everything = await search.search("hit", paths=["."])
    assert len(everything.matches) == 4


async def test_an_unknown_path_is_not_found(make: Make) -> None:
    search = make({"a.txt": "hit\n"})
    with pytest.raises(NotFound) as caught:
        await search.search("hit", paths=["nope"])
    assert caught.value.code is ErrorCode.NOT_FOUND


@pytest.mark.parametrize("path", ["../", "/etc", "a/../../x", "a\x00b", "~/x"])
async def test_a_path_outside_the_workspace_is_refused(make: Make, path: str) -> None:
    search = make({"a.txt": "hit\n"})
    with pytest.raises(InvalidArgument) as caught:
        await search.search("hit", paths=[path])
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS


async def test_a_symlinked_path_is_refused_and_a_symlink_in_the_tree_is_not_followed(
    make: Make,
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("CANARY outside\n")
    search = make({"in.txt": "CANARY inside\n"})
    root = tmp_path / "ws"
    (root / "link").symlink_to(outside)
    (root / "file-link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(InvalidArgument, match="symbolic link"):
        await search.search("CANARY", paths=["link"])
    with pytest.raises(InvalidArgument):
        await search.search("CANARY", paths=["link/secret.txt"])
    result = await search.search("CANARY")
    assert _where(result) == [("in.txt", 1)]


async def test_a_fifo_path_is_refused_rather_than_read(make: Make, tmp_path: Path) -> None:
    search = make({"a.txt": "hit\n"})
    os.mkfifo(tmp_path / "ws" / "pipe")
    with pytest.raises(InvalidArgument, match="neither a file nor a directory"):
        await search.search("hit", paths=["pipe"])
    result = await search.search("hit")  # a walk passes the FIFO by
    assert _where(result) == [("a.txt", 1)]


async def test_a_file_with_several_hard_links_is_left_out_and_counted(
    make: Make,
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("CANARY linked\n")
    search = make({"a.txt": "CANARY plain\n"})
    os.link(outside, tmp_path / "ws" / "hard.txt")
    result = await search.search("CANARY")
    assert _where(result) == [("a.txt", 1)]
    assert result.refused_files == 1
    assert result.total_matches == 1


async def test_gitignore_is_honoured_without_a_git_repository(make: Make) -> None:
    search = make(
        {
            ".gitignore": "ignored.txt\nbuild/\n",
            "sub/.ignore": "local.txt\n",
            "ignored.txt": "hit\n",
            "build/out.txt": "hit\n",
            "sub/local.txt": "hit\n",
            "sub/kept.txt": "hit\n",
            "kept.txt": "hit\n",
            ".hidden.txt": "hit\n",
        },
    )
    result = await search.search("hit")
    assert _where(result) == [("kept.txt", 1), ("sub/kept.txt", 1)]


async def test_ignore_files_above_the_root_do_not_apply(rg: str, tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("ws/\n*.txt\n")
    root = tmp_path / "ws"
    _write(root, {"a.txt": "hit\n"})
    search = TextSearch(Workspace(root), SearchConfig(rg=rg))
    result = await search.search("hit")
    assert _where(result) == [("a.txt", 1)]


async def test_a_named_path_is_searched_even_when_ignored(make: Make) -> None:
    search = make({".gitignore": "ignored.txt\n", "ignored.txt": "hit\n"})
    result = await search.search("hit", paths=["ignored.txt"])
    assert _where(result) == [("ignored.txt", 1)]


async def test_include_and_exclude_globs_choose_files_and_never_override_ignores(
    make: Make,
) -> None:
    search = make(
        {
            ".gitignore": "secret.py\n",
            "a.py": "hit\n",
            "b.md": "hit\n",
            "secret.py": "hit\n",
            "test_a.py": "hit\n",
            "d/c.py": "hit\n",
        },
    )
    result = await search.search("hit", include=["*.py"])
    assert _where(result) == [("a.py", 1), ("d/c.py", 1), ("test_a.py", 1)]
    narrowed = await search.search("hit", include=["*.{py,md}"], exclude=["test_*"])
    assert _where(narrowed) == [("a.py", 1), ("b.md", 1), ("d/c.py", 1)]
    named = await search.search("hit", include=["secret.py"])
    assert named.matches == ()


@pytest.mark.parametrize("glob", ["d/*.py", "!*.py", "a:b", "x\ny", "a\\b", "", "x" * 101])
async def test_a_glob_that_is_not_a_file_name_glob_is_refused(make: Make, glob: str) -> None:
    search = make({"a.py": "hit\n"})
    with pytest.raises(InvalidArgument):
        await search.search("hit", include=[glob])


async def test_a_glob_ripgrep_cannot_parse_is_refused(make: Make) -> None:
    search = make({"a.py": "hit\n"})
    with pytest.raises(InvalidArgument, match="glob is not valid"):
        await search.search("hit", exclude=["{a,{b}}"])


async def test_too_many_paths_or_globs_are_refused(make: Make) -> None:
    search = make({"a.py": "hit\n"})
    with pytest.raises(InvalidArgument):
        await search.search("hit", paths=["a.py"] * 17)
    with pytest.raises(InvalidArgument):
        await search.search("hit", include=["*.py"] * 9)


async def test_binary_files_are_skipped(make: Make) -> None:
    search = make({"bin.dat": b"hit\x00\x01\x02\n", "a.txt": "hit\n"})
    result = await search.search("hit")
    assert _where(result) == [("a.txt", 1)]


# --- what comes back ---------------------------------------------------------------------------


async def test_lines_that_are_not_utf8_are_decoded_with_replacement(make: Make) -> None:
    search = make({"a.txt": b"caf\xe9 hit \xff\xfe end\r\n"})
    result = await search.search("hit")
    (match,) = result.matches
    assert match.text == "caf\ufffd hit \ufffd\ufffd end"
    start, end = match.ranges[0]
    assert match.text[start:end] == "hit"


async def test_a_file_name_that_is_not_utf8_is_shown_with_replacement(
    make: Make,
    tmp_path: Path,
) -> None:
    search = make({})
    name = os.fsencode(tmp_path / "ws") + b"/caf\xe9.txt"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644)  # a bytes path is the point
    os.write(fd, b"hit\n")
    os.close(fd)
    result = await search.search("hit")
    assert _where(result) == [("caf\ufffd.txt", 1)]


async def test_ranges_are_characters_not_bytes(make: Make) -> None:
    search = make({"a.txt": "héllo hit wörld 😀 hit ü hit\n"})
    (match,) = (await search.search("hit")).matches
    assert len(match.ranges) == 3
    assert [match.text[start:end] for start, end in match.ranges] == ["hit"] * 3


async def test_a_long_line_is_cut_to_a_window_showing_the_match(make: Make) -> None:
    line = "x" * 5000 + "NEEDLE" + "y" * 5000
    search = make({"a.txt": f"{line}\nshort NEEDLE\n" + "z" * 400 + "\n"}, max_line_chars=100)
    result = await search.search("NEEDLE", context=1)
    first, second = result.matches
    assert first.cut
    assert len(first.text) == 100
    assert first.text_start == 5000 - 25
    start, end = first.ranges[0]
    assert first.text[start:end] == "NEEDLE"
    assert line[first.text_start : first.text_start + 100] == first.text
    assert not second.cut
    (after,) = second.after
    assert after.cut
    assert after.text == "z" * 100


async def test_a_line_too_long_to_read_whole_still_reports_where_it_is(make: Make) -> None:
    huge = "a" * (3 << 20)
    search = make({"a.txt": f"first\n{huge}hit\nlast hit\n"}, max_line_chars=50)
    result = await search.search("hit")
    first, second = result.matches
    assert (first.line, first.cut, first.text) == (2, True, "a" * 50)
    assert first.ranges == ()
    assert (second.line, second.text) == (3, "last hit")


async def test_a_line_too_long_and_not_utf8_still_reports_where_it_is(make: Make) -> None:
    huge = b"\xff" * (2 << 20)
    search = make({"a.txt": b"x\n" + huge + b"hit\n"}, max_line_chars=10)
    (match,) = (await search.search("hit")).matches
    assert (match.line, match.cut, match.text) == (2, True, "\ufffd" * 10)


# --- totals and pages ----------------------------------------------------------------------------


def _many(files: int, per_file: int) -> dict[str, str | bytes]:
    body = "".join(f"hit {n}\nmiss\n" for n in range(per_file))
    return {f"d{i % 3}/f{i:03d}.txt": body for i in range(files)}


async def test_truncation_reports_totals_and_paging_covers_every_match_once(make: Make) -> None:
    search = make(_many(files=7, per_file=5))
    first = await search.search("hit", max_results=10)
    assert len(first.matches) == 10
    assert (first.total_matches, first.files_with_matches) == (35, 7)
    assert first.complete
    assert first.truncated
    assert first.next_skip == 10
    seen = list(_where(first))
    skip: int | None = first.next_skip
    while skip is not None:
        page = await search.search("hit", max_results=10, skip=skip)
        seen += _where(page)
        skip = page.next_skip
    assert len(seen) == 35
    assert len(set(seen)) == 35
    assert seen == sorted(seen, key=lambda item: (item[0].split("/"), item[1]))


async def test_a_skip_past_the_end_gives_an_empty_complete_page(make: Make) -> None:
    search = make(_many(files=2, per_file=2))
    result = await search.search("hit", skip=50)
    assert result.matches == ()
    assert result.total_matches == 4
    assert not result.truncated


@pytest.mark.parametrize("paths", [[], ["d1", "a.txt", "a", "d0/f003.txt", "A.txt"]])
async def test_a_search_over_the_count_limit_pages_in_the_same_order(
    make: Make,
    paths: list[str],
) -> None:
    files = _many(files=12, per_file=4)
    files.update({"a.txt": "hit\n", "a/b.txt": "hit\n", "a-b.txt": "hit\n", "A.txt": "hit\n"})
    files["a.b/é.txt"] = files["a_b.txt"] = "hit\n"
    exact = make(files)
    capped = make(max_matches=5, count_limit=6)
    whole = await exact.search("hit", paths=paths)
    assert whole.complete
    assert len(whole.matches) > 6
    seen: list[tuple[str, int | None]] = []
    skip: int | None = 0
    while skip is not None:
        page = await capped.search("hit", skip=skip, paths=paths)
        assert page.complete or page.total_matches > 6
        seen += _where(page)
        skip = page.next_skip
    assert seen == _where(whole)


async def test_a_capped_search_reports_a_lower_bound(make: Make) -> None:
    search = make(_many(files=10, per_file=10), max_matches=3, count_limit=20)
    result = await search.search("hit")
    assert len(result.matches) == 3
    assert not result.complete
    assert result.truncated
    assert result.next_skip == 3
    assert result.total_matches > 20
    assert result.files_with_matches >= 1


async def test_a_capped_search_that_skips_to_its_end_is_complete(make: Make) -> None:
    search = make(_many(files=5, per_file=5), max_matches=3, count_limit=3)
    result = await search.search("hit", skip=24)
    assert _where(result) == [("d2/f002.txt", 9)]
    assert result.complete
    assert result.total_matches == 25
    assert not result.truncated


async def test_no_match_is_an_empty_complete_result(make: Make) -> None:
    search = make({"a.txt": "nothing\n"})
    result = await search.search("absent")
    assert result.matches == ()
    assert (result.total_matches, result.files_with_matches) == (0, 0)
    assert result.complete
    assert result.elapsed_ms is not None


# --- time ----------------------------------------------------------------------------------------


async def test_a_search_out_of_time_is_killed_and_says_so(make: Make) -> None:
    search = make(_many(files=50, per_file=50))
    result = await search.search("hit", timeout=0)
    assert result.timed_out
    assert not result.complete
    assert result.truncated
    assert result.next_skip is None
    assert _children_named("rg") == []


def _sleeper(tmp_path: Path, *, timeout: float) -> tuple[TextSearch, Path]:
    """A fake ripgrep that starts a second process in its group, tells its pid, and hangs.

    A shell script cannot run confined (no shell there), so it runs unconfined.

    The pid is written to a FIFO, so reading it waits for exactly that moment.
    """
    if SLEEP is None:  # pragma: no cover - coreutils are everywhere the tests run
        pytest.skip("no sleep binary")
    pid_fifo = tmp_path / "child.pid"
    os.mkfifo(pid_fifo)
    fake = tmp_path / "fake-rg"
    fake.write_text(f"#!/bin/sh\n{SLEEP} 60 &\necho $! > {pid_fifo}\nexec {SLEEP} 60\n")
    fake.chmod(0o755)
    root = tmp_path / "ws"
    root.mkdir()
    config = SearchConfig(rg=str(fake), timeout=timeout, confine=False)
    return TextSearch(Workspace(root), config), pid_fifo


async def _pid(fifo: Path) -> int:
    return int(await read_line(fifo))


async def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    search, pid_fifo = _sleeper(tmp_path, timeout=2.0)
    result, pid = await asyncio.gather(search.search("hit"), _pid(pid_fifo))
    assert result.timed_out
    assert result.matches == ()
    assert _is_dead(pid)


async def test_ripgrep_has_a_process_group_of_its_own_but_not_a_session(tmp_path: Path) -> None:
    # Its group is killed whole; a session would be a scheduling autogroup of its own.
    search, pid_fifo = _sleeper(tmp_path, timeout=60)
    task = asyncio.ensure_future(search.search("hit"))
    try:
        pid = await _pid(pid_fifo)
        assert os.getpgid(pid) != os.getpgid(0)
        assert os.getsid(pid) == os.getsid(0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert _is_dead(pid)


async def test_a_cancelled_search_leaves_no_process_behind(tmp_path: Path) -> None:
    search, pid_fifo = _sleeper(tmp_path, timeout=60)
    task = asyncio.ensure_future(search.search("hit"))
    pid = await _pid(pid_fifo)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _is_dead(pid)
    assert _children_named("sleep") == []


async def test_a_failing_search_program_is_a_failure_not_a_result(tmp_path: Path) -> None:
    fake = tmp_path / "fake-rg"
    fake.write_text("#!/bin/sh\necho 'something broke' >&2\nexit 2\n")
    fake.chmod(0o755)
    broken = tmp_path / "broken-rg"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    root = tmp_path / "ws"
    root.mkdir()
    with pytest.raises(ToolFailed, match="search failed"):
        await TextSearch(Workspace(root), SearchConfig(rg=str(fake), confine=False)).search("hit")
    with pytest.raises(ToolFailed, match="could not be started"):
        await TextSearch(Workspace(root), SearchConfig(rg=str(broken), confine=False)).search("hit")


def _children_named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and comm == name:
            found.append(int(entry.name))
    return found


def _is_dead(pid: int) -> bool:
    """Whether `pid` has ended, waiting at most 10 s for it (a pidfd is readable then)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], 10.0)
    finally:
        os.close(pidfd)
    return bool(readable)


# --- arguments and configuration ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"pattern": ""}, "1-1000 characters"),
        ({"pattern": "a\x00b"}, "NUL"),
        ({"pattern": "a\nb"}, "line breaks"),
        ({"pattern": "a", "context": 6}, "context"),
        ({"pattern": "a", "max_results": 0}, "max_results"),
        ({"pattern": "a", "skip": -1}, "skip"),
        ({"pattern": "a", "case": "upper"}, "case"),
    ],
)
async def test_arguments_out_of_bounds_are_refused(
    make: Make,
    arguments: dict[str, Any],
    message: str,
) -> None:
    search = make({"a.txt": "a\n"})
    pattern = arguments.pop("pattern")
    with pytest.raises(InvalidArgument, match=message):
        await search.search(pattern, **arguments)


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 0},
        {"max_matches": 0},
        {"max_context": -1},
        {"count_limit": 10, "max_matches": 20},
        {"regex_size_limit": 0},
    ],
)
def test_a_config_out_of_bounds_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        SearchConfig(rg="/usr/bin/rg", **options)


def test_a_missing_or_relative_ripgrep_is_a_configuration_error(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    with pytest.raises(ConfigurationError, match="not found"):
        TextSearch(workspace, SearchConfig(rg=None))
    with pytest.raises(ConfigurationError, match="absolute"):
        TextSearch(workspace, SearchConfig(rg="rg"))


def test_the_default_config_finds_ripgrep_on_path(rg: str) -> None:
    assert SearchConfig().rg == rg


def test_ripgrep_runs_confined_by_default_and_unconfined_only_by_choice(
    rg: str,
    tmp_path: Path,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    workspace = Workspace(tmp_path)
    search = TextSearch(workspace, SearchConfig(rg=rg))
    assert search.confined
    assert search.confined_by == ("landlock" if landlock_usable() else "bubblewrap")
    unconfined = TextSearch(workspace, SearchConfig(rg=rg, confine=False))
    assert not unconfined.confined
    assert unconfined.confined_by is None
    chosen = TextSearch(workspace, SearchConfig(rg=rg, confinement="bubblewrap"))
    assert chosen.confined_by == "bubblewrap"
    with pytest.raises(ConfigurationError, match="bubblewrap"):
        TextSearch(workspace, SearchConfig(rg=rg, bwrap=None, confinement="bubblewrap"))
    with pytest.raises(ConfigurationError, match="confinement"):
        SearchConfig(rg=rg, confinement="chroot")  # type: ignore[arg-type]


async def test_an_unconfined_search_finds_the_same_as_a_confined_one(make: Make) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    files = {"a.txt": "hit\n", "sub/b.txt": "hit here\n", ".hidden": "hit\n"}
    confined = await make(files).search("hit")
    by_bwrap = await make(confinement="bubblewrap").search("hit")
    unconfined = await make(confine=False).search("hit")
    expected = [("a.txt", 1), ("sub/b.txt", 1)]
    assert _where(confined) == _where(by_bwrap) == _where(unconfined) == expected


# --- through the gate ----------------------------------------------------------------------------


async def test_search_text_is_an_untrusted_l1_read_through_the_gate(
    rg: str, tmp_path: Path
) -> None:
    _write(tmp_path, {"a.txt": "hello world\n"})
    (search_text,) = search_tools(Workspace(tmp_path), SearchConfig(rg=rg))
    spec = search_text.spec
    assert spec.name == "workspace.search_text"
    assert spec.risk is RiskLevel.L1_INTERNAL_READ
    assert spec.side_effect is SideEffect.NONE
    assert spec.results.trust is Trust.UNTRUSTED
    registry = Registry()
    registry.register(search_text)
    gate = Gate(registry, audit=MemoryAuditSink(), clock=FixedClock(), new_id=sequential_ids())
    who = Principal(user_id="u", tenant_id="t")
    call = ToolCall(id="c1", name=spec.name, arguments=json.dumps({"pattern": "world"}))
    envelope = await gate.handle(call, who)
    assert envelope.status is Status.OK
    assert envelope.trust is Trust.UNTRUSTED
    data = envelope.data
    assert data["matches"][0]["path"] == "a.txt"
    assert data["matches"][0]["ranges"] == [[6, 11]]
    assert data["complete"] is True
    too_long = ToolCall(id="c2", name=spec.name, arguments=json.dumps({"pattern": "x" * 1001}))
    refused = await gate.handle(too_long, who)
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    missing = ToolCall(id="c3", name=spec.name, arguments='{"pattern": "x", "paths": ["nope"]}')
    assert (await gate.handle(missing, who)).error_type is ErrorCode.NOT_FOUND


async def test_a_full_page_fits_the_gate_budget_whole_so_skip_stays_exact(
    rg: str,
    tmp_path: Path,
) -> None:
    _write(tmp_path, {f"f{n:03d}.txt": f"hit {'x' * 150}\n" * 3 for n in range(100)})
    (search_text,) = search_tools(Workspace(tmp_path), SearchConfig(rg=rg))
    registry = Registry()
    registry.register(search_text)
    gate = Gate(registry, audit=MemoryAuditSink(), clock=FixedClock(), new_id=sequential_ids())
    call = ToolCall(id="c1", name=search_text.name, arguments='{"pattern": "hit", "context": 1}')
    envelope = await gate.handle(call, Principal(user_id="u", tenant_id="t"))
    assert envelope.status is Status.OK
    assert envelope.omitted == ()
    data = envelope.data
    assert data["truncated"] is True
    assert data["next_skip"] == len(data["matches"]) > 10


def test_the_namespace_can_be_chosen(rg: str, tmp_path: Path) -> None:
    (search_text,) = search_tools(Workspace(tmp_path), SearchConfig(rg=rg), namespace="repo")
    assert search_text.name == "repo.search_text"
    assert search_text.spec.input_schema["properties"]["context"]["maximum"] == 5


# --- reading the output stream -------------------------------------------------------------------


_LINE = st.one_of(
    st.binary(max_size=12).map(lambda raw: raw.replace(b"\n", b"")),
    st.integers(min_value=30, max_value=90).map(lambda n: bytes(range(32, 32 + n))),
)


@given(lines=st.lists(_LINE, max_size=20), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_lines_are_split_the_same_however_the_stream_is_chunked(
    lines: list[bytes],
    cuts: list[int],
) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    splitter = Lines(limit=20, head=8, tail=4)
    out: list[bytes | Long] = []
    start = 0
    for cut in sorted(cut % (len(stream) + 1) for cut in cuts):
        out += splitter.feed(stream[start:cut])
        start = cut
    out += splitter.feed(stream[start:])
    out += splitter.close()
    expected = [line if len(line) <= 20 else Long(line[:8], line[-4:]) for line in lines if line]
    assert out == expected


def test_a_stream_without_a_final_line_break_keeps_its_last_line() -> None:
    splitter = Lines(limit=4, head=2, tail=2)
    assert splitter.feed(b"ab\ncd") == [b"ab"]
    assert splitter.close() == [b"cd"]
    assert splitter.feed(b"abcdefgh") == []
    assert splitter.close() == [Long(b"ab", b"gh")]
    assert splitter.close() == []


@given(text=st.text(max_size=40), cut=st.integers(0, 400))
def test_a_json_string_cut_anywhere_reads_as_a_prefix_of_the_text(text: str, cut: int) -> None:
    encoded = json.dumps(text, ensure_ascii=cut % 2 == 0).encode("utf-8", "surrogatepass")
    body = encoded[1:-1]
    prefix = json_string_prefix(body[: cut % (len(body) + 1)])
    assert text.startswith(prefix)
    assert json_string_prefix(body + b'","more":1') == text


async def test_a_regex_too_large_to_compile_is_refused(make: Make) -> None:
    search = make({"a.txt": "x\n"}, regex_size_limit=1 << 16)
    with pytest.raises(InvalidArgument, match="too large"):
        await search.search(r"\w{300}", regex=True)


def test_refusals_from_ripgrep_are_in_our_words() -> None:
    unparsed = rg_refusal(b"regex parse error:\n    (\n")
    assert isinstance(unparsed, InvalidArgument)
    assert unparsed.message.endswith("it does not parse.")
    odd = rg_refusal(b"regex parse error:\nerror: bad \x1b[31mthing\n")
    assert "\x1b" not in str(odd)
    assert isinstance(rg_refusal(b"anything else"), ToolFailed)


# --- ripgrep's output, whatever it holds ---------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 40) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_B64 = st.sampled_from(["YQ==", "w6k=", "/w==", "!!", "YWJj", "ab=c"])
_DATA = st.fixed_dictionaries(
    {},
    optional={
        "path": _JSON
        | st.fixed_dictionaries({"text": st.sampled_from(["a", "./b/c", "", ".", "d/e"])})
        | st.fixed_dictionaries({"bytes": _B64}),
        "lines": _JSON
        | st.fixed_dictionaries({"text": st.text(max_size=30)})
        | st.fixed_dictionaries({"bytes": _B64}),
        "line_number": st.integers(0, 12) | _JSON,
        "submatches": _JSON
        | st.lists(
            _JSON
            | st.fixed_dictionaries({"start": st.integers(-1, 40), "end": st.integers(-1, 40)}),
            max_size=4,
        ),
        "elapsed_total": _JSON
        | st.fixed_dictionaries({"secs": st.integers(0, 3), "nanos": st.integers(0, 10**9)}),
    },
)


def _encoded(kind: str, data: object) -> bytes:
    return json.dumps({"type": kind, "data": data}, separators=(",", ":")).encode()


_BODY = st.builds(
    _encoded,
    st.sampled_from(["match", "context", "match", "summary", "other"]),
    _DATA | _JSON,
) | st.builds(
    Long,
    st.sampled_from([b'{"type":"match"', b'{"type":"context"']),
    _JSON.map(lambda value: json.dumps(value).encode()),
)
_BEGIN = st.builds(
    _encoded,
    st.just("begin"),
    st.fixed_dictionaries({"path": st.fixed_dictionaries({"text": st.sampled_from(["a", "b/c"])})})
    | _DATA
    | _JSON,
)
_BLOCK = st.tuples(
    _BEGIN,
    st.lists(_BODY | st.binary(max_size=12), max_size=6),
    st.builds(_encoded, st.just("end"), _JSON),
).map(lambda block: [block[0], *block[1], block[2]])
_RAW_LINES = st.lists(_BLOCK | _BODY.map(lambda line: [line]), max_size=6).map(
    lambda blocks: [line for block in blocks for line in block],
)


@given(lines=_RAW_LINES, admit=st.booleans(), skip=st.integers(0, 3), context=st.integers(0, 2))
def test_any_output_reads_into_a_bounded_page_without_error(
    lines: list[bytes | Long],
    admit: bool,
    skip: int,
    context: int,
) -> None:
    def page() -> Page:
        return Page(skip=skip, limit=3, context=context, max_chars=8, budget=10_000)

    collect = Collect(lambda parts: admit, count_limit=50)
    ordered = page()
    stream = Stream(lambda parts: admit, ordered)
    for line in lines:
        collect.take_all((line,))
        stream.take_all((line,))
    replayed = page()
    collect.replay(replayed)
    for shown in (ordered, replayed):
        for match in shown.matches():
            assert len(match.text) <= 8
            assert all(0 <= a <= b <= len(match.text) for a, b in match.ranges)
            assert len(match.before) <= context
            assert len(match.after) <= context
        assert len(shown.items) <= 3
    elapsed = elapsed_ms(collect.summary)
    assert elapsed is None or elapsed >= 0


@given(lines=_RAW_LINES, admit=st.booleans(), cut=st.integers(0, 40), limit=st.integers(1, 4))
def test_a_read_of_lines_at_once_is_taken_as_line_by_line(
    lines: list[bytes | Long],
    admit: bool,
    cut: int,
    limit: int,
) -> None:
    def page() -> Page:
        return Page(skip=0, limit=limit, context=1, max_chars=8, budget=10_000)

    def shown(sink: Collect | Stream, page: Page) -> tuple[object, ...]:
        if isinstance(sink, Collect):
            sink.replay(page)
        return (sink.files, sink.refused, sink.summary, page.seen, page.matches())

    one, batch = (
        Collect(lambda parts: admit, count_limit=limit),
        Collect(lambda parts: admit, count_limit=limit),
    )
    stop_one = any(one.take_all((line,)) for line in lines)
    stop_batch = batch.take_all(lines[:cut]) or batch.take_all(lines[cut:])
    assert stop_one == stop_batch
    assert (one.matches, shown(one, page())) == (batch.matches, shown(batch, page()))
    one_page, batch_page = page(), page()
    ordered, batched = (
        Stream(lambda parts: admit, one_page),
        Stream(lambda parts: admit, batch_page),
    )
    assert any(ordered.take_all((line,)) for line in lines) == (
        batched.take_all(lines[:cut]) or batched.take_all(lines[cut:])
    )
    assert shown(ordered, one_page) == shown(batched, batch_page)


_PATH_TEXT = st.sampled_from(
    ["./a", "./b/c", "a", "./d/e/f", "./é", "./a/./b", "a//b", "./", ".", 'x"y', "a/"]
)


def _begin_line(path: str) -> bytes:
    text = json.dumps({"type": "begin", "data": {"path": {"text": path}}}, ensure_ascii=False)
    return text.replace(" ", "").encode()


_RUN_MATCH = st.builds(
    _encoded,
    st.sampled_from(["match", "match", "context"]),
    st.fixed_dictionaries(
        {"lines": st.fixed_dictionaries({"text": st.text(max_size=12)})},
        optional={"line_number": st.integers(1, 9)},
    ),
)
_RUN_BODY = st.one_of(
    _RUN_MATCH,
    st.sampled_from(
        [b'{"type":"summary","data":{"elapsed_total":{"secs":0,"nanos":5}}}', b"", b"oops"]
    ),
    st.binary(min_size=70, max_size=90).map(lambda raw: raw.replace(b"\n", b"")),
)
_RUN_FILE = st.tuples(
    _PATH_TEXT.map(_begin_line)
    | st.sampled_from(
        [
            b'{"type":"begin","data":{"path":{"bytes":"YQ=="}}}',
            b'{"type":"begin","data":{"path":{"text":"./\xff"}}}',
        ]
    ),
    st.lists(_RUN_BODY, max_size=4) | st.lists(_RUN_MATCH, min_size=1, max_size=3),
    st.sampled_from([b'{"type":"end","data":{}}', b""]),
).map(lambda file: [file[0], *file[1], *([file[2]] if file[2] else [])])
_RUN_STREAM = st.lists(_RUN_FILE | _RUN_BODY.map(lambda line: [line]), max_size=12).map(
    lambda files: b"".join(line + b"\n" for file in files for line in file),
)


_M = b'{"type":"match","data":{"lines":{"text":"m"}}}\n'
_E = b'{"type":"end","data":{}}\n'


@given(
    stream=_RUN_STREAM,
    cuts=st.lists(st.integers(0, 4000), max_size=6),
    limit=st.integers(1, 6),
    admit=st.booleans(),
)
# Plain files whose names are not UTF-8; a stop within plain files held one at a time;
# a stop on the lines that continue a file begun in an earlier run.
@example(stream=_begin_line("./a") + b"\n" + _M + _E, cuts=[], limit=3, admit=True)
@example(
    stream=b'{"type":"begin","data":{"path":{"text":"./\xff"}}}\n' + _M + _E,
    cuts=[],
    limit=3,
    admit=True,
)
@example(
    stream=b"".join(_begin_line(f"./{n}") + b"\n" + _M + _M + _E for n in "abc"),
    cuts=[],
    limit=3,
    admit=True,
)
@example(
    stream=_begin_line("./a") + b"\n" + _M * 4 + _E + _begin_line("./b") + b"\n" + _M + _E,
    cuts=[len(_begin_line("./a")) + 1 + len(_M)],
    limit=2,
    admit=True,
)
def test_runs_of_lines_are_taken_as_line_by_line(
    stream: bytes, cuts: list[int], limit: int, admit: bool
) -> None:
    def page() -> Page:
        return Page(skip=0, limit=limit, context=1, max_chars=8, budget=10_000)

    def shown(sink: Collect) -> tuple[object, ...]:
        shown = page()
        sink.replay(shown)
        return (sink.files, sink.refused, sink.summary, shown.seen, shown.matches())

    by_line, by_run = (
        Collect(lambda parts: admit, count_limit=limit),
        Collect(lambda parts: admit, count_limit=limit),
    )
    lines, runs = Lines(limit=80, head=16, tail=8), Lines(limit=80, head=16, tail=8)
    stop_line = any(by_line.take_all((line,)) for line in [*lines.feed(stream), *lines.close()])
    stop_run = False
    start = 0
    for cut in [*sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]:
        stop_run = stop_run or by_run.take_runs(runs.runs(stream[start:cut]))
        start = cut
    stop_run = stop_run or by_run.take_runs(runs.close())
    assert stop_run == stop_line
    if stop_line:
        assert by_run.matches >= by_line.matches > limit
        assert by_run.files == by_line.files
    else:
        assert by_run.matches == by_line.matches
        assert shown(by_run) == shown(by_line)


@given(lines=st.lists(_LINE, max_size=20), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_runs_hold_the_lines_of_feed(lines: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    splitter = Lines(limit=20, head=8, tail=4)
    out: list[bytes | Long] = []
    start = 0
    for cut in [*sorted(cut % (len(stream) + 1) for cut in cuts), len(stream)]:
        out += splitter.runs(stream[start:cut])
        start = cut
    out += splitter.close()
    split = [
        line
        for item in out
        for line in (item.split(b"\n") if isinstance(item, bytes) else [item])
        if line
    ]
    expected = [line if len(line) <= 20 else Long(line[:8], line[-4:]) for line in lines if line]
    assert split == expected


def test_plain_files_are_cut_out_of_a_run_and_the_rest_left_between() -> None:
    begin = b'\n{"type":"begin","data":{"path":{"text":"./a/b"}}}'
    match = b'\n{"type":"match","data":{}}'
    context = b'\n{"type":"context","data":{}}'
    end = b'\n{"type":"end","data":{"stats":1}}'
    odd = b'\n{"type":"begin","data":{"path":{"text":"./q\\"x"}}}'
    run = match + end + begin + match + context + match + end + odd + match + end
    assert plain_files(run) == [match + end, b"./a/b", match + context + match, odd + match + end]
    assert run_matches(match + context + match) == 2
    assert run_matches(context) == 0
    assert run_matches(match + b"\n") is None
    assert run_matches(match + b'\n{"type":"summary"}') is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"lines": {"other": 1}, "line_number": "7"}, (None, "", ())),
        ({"lines": {"bytes": 5}}, (None, "", ())),
        ({"lines": {"bytes": "ab=c"}, "line_number": 2}, (2, "", ())),
        ({"lines": {"text": "abc"}, "submatches": "all"}, (None, "abc", ())),
        (
            {"lines": {"text": "abcdef"}, "submatches": [1, {"start": 3, "end": 1}, {"start": 1}]},
            (None, "abcdef", ()),
        ),
        (
            {"lines": {"text": "é" * 300}, "submatches": [{"start": 0, "end": 2}] * 300},
            (None, "é" * 300, ((0, 1),) * 64),
        ),
    ],
)
def test_odd_match_data_reads_as_far_as_it_goes(
    data: dict[str, Any],
    expected: tuple[int | None, str, tuple[tuple[int, int], ...]],
) -> None:
    found = line_text(data, 1000)
    assert (found.line, found.text, found.ranges) == expected


def test_odd_messages_read_as_nothing() -> None:
    assert message(b"[1, 2]") == {}
    assert message(b'{"type": "match", "data": 3}') == {}
    assert path_parts({"path": {"bytes": "ab=c"}}) is None
    assert path_parts({"path": {"other": "x"}}) is None
    assert path_parts({"path": {"text": "./"}}) is None
    assert elapsed_ms({"elapsed_total": {"secs": "1", "nanos": 0}}) is None
    assert elapsed_ms({"elapsed_total": {"secs": 1, "nanos": 500_000}}) == 1000.5
    assert long_message(Long(b'{"type":"match","data":{}', b"}}")) == {
        "line_number": None,
        "long": True,
    }
    broken = long_message(Long(b'{"type":"match","data":{"lines":{"bytes":"ab=c', b""))
    assert broken["lines"] == {"text": ""}
    assert json_string_prefix(b"\\xff" + b"\xff" * 20) == ""
    assert json_string_prefix(b'say \\"hi\\" \\\\","more":1') == 'say "hi" \\'


def _standard_message(line: bytes) -> dict[str, Any]:
    """`message` as the standard library's parser reads a line (what it did before orjson)."""
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(value, dict) or not isinstance(value.get("data"), dict):
        return {}
    data = value["data"]
    return {**data, "summary": True} if value.get("type") == "summary" else data


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    st.sampled_from(["match", "context", "begin", "end", "summary", "other"]),
    st.dictionaries(st.sampled_from(["lines", "line_number", "path", "x"]), _JSON_VALUES),
)
@example("match", {"lines": {"text": "\ud800 lone"}})
def test_messages_read_as_the_standard_parser_reads_them(kind: str, data: dict[str, Any]) -> None:
    line = json.dumps({"type": kind, "data": data}).encode()
    assert message(line) == _standard_message(line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"match","data":{"lines":{"text":"\\ud800 alone"}}}',
        b'{"type":"match","data":{"line_number":1e400}}',
        b'{"type":"match","data":{"line_number":NaN}}',
        b'\xef\xbb\xbf{"type":"match","data":{"line_number":1}}',
        b'{"type":"match","data":{"lines":{"text":"\xff"}}}',
        b'{"type":"match","data":{"line_number":1} trailing',
        b"",
    ],
)
def test_lines_the_fast_parser_refuses_read_as_the_standard_parser_reads_them(line: bytes) -> None:
    assert message(line) == _standard_message(line)


async def test_a_page_stops_at_its_character_budget_and_skip_counts_what_was_shown(
    make: Make,
) -> None:
    line = "hit " + "x" * 96
    search = make({"a.txt": f"{line}\n" * 100, "b.txt": "before\nhit\nafter\n"})
    search = make(max_result_chars=2_000)
    first = await search.search("hit", context=1)
    assert 1 < len(first.matches) < 100
    assert first.truncated
    assert first.next_skip == len(first.matches)
    biggest = max(json_size(match) for match in first.matches)
    assert json_size(first.matches) <= 2_000 + biggest
    seen = _where(first)
    skip: int | None = first.next_skip
    while skip is not None:
        page = await search.search("hit", context=1, skip=skip)
        seen += _where(page)
        skip = page.next_skip
    assert seen == [("a.txt", n) for n in range(1, 101)] + [("b.txt", 2)]


async def test_one_match_is_shown_even_when_it_alone_is_over_budget(make: Make) -> None:
    search = make({"a.txt": "hit " + "y" * 500 + "\nhit\n"}, max_result_chars=10)
    result = await search.search("hit")
    assert _where(result) == [("a.txt", 1)]
    assert result.next_skip == 1


_FIXED_FLAGS = frozenset(
    {
        "--json",
        "--no-config",
        "--no-follow",
        "--no-messages",
        "--no-require-git",
        "--no-ignore-parent",
        "--no-ignore-global",
        "--smart-case",
        "--case-sensitive",
        "--ignore-case",
        "--fixed-strings",
        "--sort=path",
        "--type=handrailinclude",
        "--type-not=handrailexclude",
        "--iglob=!.git",  # the workspace's ignore policy, from configuration
    },
)
_PATTERN = st.text(min_size=1, max_size=30).filter(lambda p: not set(p) & {"\x00", "\n", "\r"})
_GLOB = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\\:"),
    min_size=1,
    max_size=12,
).filter(lambda glob: not glob.startswith("!"))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pattern=_PATTERN,
    regex=st.booleans(),
    case=st.sampled_from(["smart", "sensitive", "insensitive"]),
    context=st.integers(0, 5),
    paths=st.lists(st.sampled_from(["-L", "--pre=sh", "a", "a/-e", "."]), max_size=4),
    include=st.lists(_GLOB, max_size=3),
    exclude=st.lists(_GLOB, max_size=3),
    ordered=st.booleans(),
)
def test_model_text_reaches_ripgrep_only_as_a_value(
    make: Make,
    pattern: str,
    regex: bool,
    case: str,
    context: int,
    paths: list[str],
    include: list[str],
    exclude: list[str],
    ordered: bool,
) -> None:
    search = make({"-L": "x", "--pre=sh/x": "x", "a/-e": "x"})
    argv = search.command(
        pattern,
        regex=regex,
        paths=paths,
        case=case,  # type: ignore[arg-type]
        context=context,
        include=include,
        exclude=exclude,
        ordered=ordered,
    )
    end = argv.index("--")
    assert argv[0] == RG
    assert argv[end - 1] == f"--regexp={pattern}"
    assert set(argv[end + 1 :]) <= {"-L", "--pre=sh", "a", "a/-e", "."}
    allowed_values = {f"--context={context}", *(f"--type-add=handrailinclude:{g}" for g in include)}
    allowed_values |= {f"--type-add=handrailexclude:{g}" for g in exclude}
    for flag in argv[1 : end - 1]:
        assert (
            flag in _FIXED_FLAGS
            or flag in allowed_values
            or re.fullmatch(r"--(regex|dfa)-size-limit=\d+", flag)
        ), flag
    assert ("--fixed-strings" in argv) is not regex
    assert ("--sort=path" in argv) is ordered


async def test_an_include_glob_selects_hidden_files_but_never_ignored_or_in_hidden_dirs(
    make: Make,
) -> None:
    search = make(
        {
            ".gitignore": ".env\n",
            ".env": "hit\n",
            ".env.example": "hit\n",
            ".git/config": "hit\n",
            ".hidden/x.txt": "hit\n",
            "a.txt": "hit\n",
        },
    )
    assert _where(await search.search("hit")) == [("a.txt", 1)]
    chosen = await search.search("hit", include=["*", ".env*", "config"])
    assert _where(chosen) == [(".env.example", 1), ("a.txt", 1)]


async def test_a_search_cancelled_while_its_process_starts_leaves_no_process_behind(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    search, pid_fifo = _sleeper(tmp_path, timeout=60)
    real = asyncio.create_subprocess_exec
    started = asyncio.Event()
    handed_over = asyncio.Event()
    pids: list[int] = []

    async def slow_start(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await real(*args, **kwargs)
        pids.append(process.pid)
        started.set()
        await handed_over.wait()  # the cancel arrives while the process is "starting"
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_start)
    task = asyncio.ensure_future(search.search("hit"))
    child = await _pid(pid_fifo)
    await started.wait()
    task.cancel()
    await asyncio.sleep(0)
    handed_over.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _is_dead(child)
    assert _is_dead(pids[0])
