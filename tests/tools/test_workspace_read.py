"""The workspace read tools on real files: find_files and read_file through a real Gate."""

from __future__ import annotations

import codecs
import fnmatch
import os
import random
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.clock import FixedClock
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.envelope import Envelope, Trust
from handrail.errors import ConfigurationError, InvalidArgument, ToolFailed
from handrail.spec import RiskLevel, SideEffect
from handrail.testing import MemoryAuditSink, sequential_ids
from handrail.tools.workspace._finder import timestamp
from handrail.tools.workspace.files import (
    Glob,
    WorkspaceConfig,
    _read,
    _ReadRequest,
    read_tools,
)
from handrail.tools.workspace.paths import Workspace

pytestmark = pytest.mark.anyio

USER = Principal(user_id="u", tenant_id="t")
Run = Callable[..., Awaitable[Envelope]]


def _tools(root: Path, **config: Any) -> dict[str, Tool]:
    workspace = Workspace(root)
    tools = read_tools(workspace, WorkspaceConfig(root=root, **config))
    return {item.name.rsplit(".", 1)[-1]: item for item in tools}


def _runner(root: Path, **config: Any) -> Run:
    registry = Registry()
    for item in _tools(root, **config).values():
        registry.register(item)
    gate = Gate(registry, audit=MemoryAuditSink(), new_id=sequential_ids())

    async def run(name: str, **arguments: object) -> Envelope:
        call = ToolCall(id="call-1", name=f"workspace.{name}", arguments=arguments)
        return await gate.handle(call, USER)

    return run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def run(root: Path) -> Run:
    return _runner(root)


def _write(root: Path, relative: str, content: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_bytes(content.encode())
    else:
        path.write_bytes(content)
    return path


def _data(envelope: Envelope) -> dict[str, Any]:
    assert envelope.status is Status.OK, envelope.summary
    data: dict[str, Any] = envelope.data
    return data


def _paths(envelope: Envelope) -> list[str]:
    return [entry["path"] for entry in _data(envelope)["entries"]]


def _context(seconds_left: float) -> ToolContext:
    clock = FixedClock()
    return ToolContext(
        principal=USER,
        call_id="c",
        tool="t",
        deadline=clock.monotonic() + seconds_left,
        clock=clock,
    )


async def _direct(tool: Tool, ctx: ToolContext, **arguments: object) -> Any:
    return await tool.invoke(tool.bind(dict(arguments)), ctx)


# --- the tools as declared ------------------------------------------------------------------


def test_both_tools_are_untrusted_l1_reads_in_their_namespace(root: Path) -> None:
    tools = read_tools(Workspace(root), WorkspaceConfig(root=root), namespace="repo")
    assert [item.name for item in tools] == ["repo.find_files", "repo.read_file"]
    for item in tools:
        assert item.spec.risk is RiskLevel.L1_INTERNAL_READ
        assert item.spec.side_effect is SideEffect.NONE
        assert item.spec.read_only
        assert item.spec.results.trust is Trust.UNTRUSTED
    schema = tools[1].spec.input_schema
    assert schema["required"] == ["path"]
    assert schema["properties"]["tail"]["anyOf"][0]["maximum"] == 400


def test_the_config_and_the_workspace_must_name_the_same_root(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(ConfigurationError):
        read_tools(Workspace(tmp_path / "a"), WorkspaceConfig(root=tmp_path / "b"))


@pytest.mark.parametrize(
    "options",
    [
        {"max_results": 0},
        {"max_read_chars": 0},
        {"timeout": 0},
    ],
)
def test_a_bad_config_is_refused(root: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        WorkspaceConfig(root=root, **options)


# --- globs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/deep/a.py", True),
        ("./*.py", "src/a.py", False),
        ("./*.py", "a.py", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/z/a.py", True),
        ("src/**", "src", True),  # "**" is zero or more parts
        ("src/**", "src/x/y", True),
        ("**/test_*.py", "tests/tools/test_x.py", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[abc]x", "bx", True),
        ("[!abc]x", "bx", False),
        ("[a-c]x", "cx", True),
        ("[]]x", "]x", True),
        ("[*]", "*", True),
        ("[*]", "a", False),
        ("a**b", "axxb", True),
        ("a**b", "ax/xb", False),
        ("*", ".hidden", True),
        ("src/", "src", True),
    ],
)
def test_globs_match_relative_paths(glob: str, path: str, *, expected: bool) -> None:
    assert Glob.compile(glob).matches(tuple(path.split("/"))) is expected


@pytest.mark.parametrize(
    "glob",
    [
        "/etc/*",
        "~/x",
        "a\\*",
        "a\x00b",
        "a\u202eb",
        "*{a,b}",
        "x}",
        "../*",
        "a/../../b",
        "[abc",
        "./",
        "*" * 25,
        "/".join(["**", "a"] * 5),
        "x" * 256,
        "x" * 513,
        "",
    ],
)
def test_unsafe_or_explosive_globs_are_refused(glob: str) -> None:
    with pytest.raises(InvalidArgument):
        Glob.compile(glob)


def test_repeated_globstars_collapse_and_literal_prefixes_start_the_walk() -> None:
    assert Glob.compile("a/**/**/b").segments == Glob.compile("a/**/b").segments
    assert Glob.compile("src/handrail/**/*.py").prefix == ("src", "handrail")
    assert Glob.compile("src/a.py").prefix == ("src",)
    assert Glob.compile("*.py").prefix == ()
    assert Glob.compile("s?c/x").prefix == ()
    assert Glob.compile("[s]rc/x").prefix == ()


def test_pruning_never_skips_a_directory_that_holds_a_match() -> None:
    glob = Glob.compile("src/*/test_*.py")
    assert glob.may_match_below(("src",))
    assert glob.may_match_below(("src", "x"))
    assert not glob.may_match_below(("src", "x", "y"))
    assert not glob.may_match_below(("docs",))
    assert Glob.compile("**/x").may_match_below(("a", "b", "c"))
    assert not Glob.compile("./a").may_match_below(("a", "b"))


def _reference(segments: list[str], parts: list[str]) -> bool:
    """An obviously correct (exponential) matcher to compare against."""
    if not segments:
        return not parts
    if segments[0] == "**":
        return any(_reference(segments[1:], parts[k:]) for k in range(len(parts) + 1))
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], segments[0])
        and _reference(segments[1:], parts[1:])
    )


_TOKENS = st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]", "[a-b]"])
_SEGMENTS = st.one_of(
    st.just("**"),
    st.lists(_TOKENS, min_size=1, max_size=5).map("".join).filter(lambda s: s not in {".", ".."}),
)
_NAMES = st.text(alphabet="ab.", min_size=1, max_size=6)


@given(
    segments=st.lists(_SEGMENTS, min_size=1, max_size=4),
    parts=st.lists(_NAMES, min_size=1, max_size=5),
)
def test_glob_matching_agrees_with_a_naive_reference(segments: list[str], parts: list[str]) -> None:
    glob = Glob.compile("./" + "/".join(segments))
    expected = _reference(segments, parts)
    assert glob.matches(tuple(parts)) is expected
    if expected:
        # Pruning is sound: every directory on the way to a match is entered.
        assert all(glob.may_match_below(tuple(parts[:k])) for k in range(1, len(parts)))


@given(pattern=st.lists(_TOKENS, min_size=1, max_size=6).map("".join), name=_NAMES)
def test_a_glob_without_a_slash_matches_the_name_at_any_depth(pattern: str, name: str) -> None:
    assume(pattern not in {".", ".."})  # refused: they name no file (tested above)
    glob = Glob.compile(pattern)
    expected = fnmatch.fnmatchcase(name, pattern)
    assert glob.matches((name,)) is expected
    assert glob.matches(("dir", "sub", name)) is expected


def test_a_long_name_against_many_stars_is_matched_in_bounded_steps() -> None:
    # The classic exponential case for backtracking matchers: it must answer at once.
    glob = Glob.compile("*a" * 11 + "b")
    assert not glob.matches(("a" * 255,))


# --- find_files -----------------------------------------------------------------------------


@pytest.fixture
def tree(root: Path) -> Path:
    _write(root, "README.md", "readme\n")
    _write(root, "src/app.py", "print(1)\n")
    _write(root, "src/app_test.py", "assert True\n")
    _write(root, "src/pkg/mod.py", "x = 1\n" * 100)
    _write(root, "src/pkg/data.bin", b"\x00" * 10)
    _write(root, "docs/guide.md", "guide\n")
    _write(root, ".git/config", "[core]\n")
    _write(root, ".git/objects/ab/cdef", "x")
    _write(root, ".env", "A=1\n")
    (root / "empty").mkdir()
    return root


async def test_find_lists_files_in_path_order_and_skips_git(tree: Path, run: Run) -> None:
    envelope = await run("find_files")
    assert _paths(envelope) == [
        ".env",
        "README.md",
        "docs/guide.md",
        "src/app.py",
        "src/app_test.py",
        "src/pkg/data.bin",
        "src/pkg/mod.py",
    ]
    data = _data(envelope)
    assert data["total"] == data["returned"] == 7
    assert data["truncated"] is False
    assert data["complete"] is True
    assert data["skipped"] == {"ignored": 1}
    first = data["entries"][1]
    assert first["size"] == len("readme\n")
    assert first["type"] == "file"
    assert datetime.fromisoformat(first["modified"]).tzinfo is not None


async def test_find_by_type(tree: Path, run: Run) -> None:
    (tree / "link").symlink_to("README.md")
    assert _paths(await run("find_files", type="dir")) == [
        "docs",
        "empty",
        "src",
        "src/pkg",
    ]
    assert _paths(await run("find_files", type="symlink")) == ["link"]
    every = _data(await run("find_files", type="any"))
    kinds = {entry["path"]: entry["type"] for entry in every["entries"]}
    assert kinds["link"] == "symlink"
    assert kinds["src"] == "dir"
    assert kinds["src/app.py"] == "file"
    assert "size" not in every["entries"][0] or kinds[every["entries"][0]["path"]] == "file"


async def test_a_glob_without_a_slash_searches_every_depth_and_dot_slash_anchors(
    tree: Path, run: Run
) -> None:
    assert _paths(await run("find_files", glob="*.md")) == ["README.md", "docs/guide.md"]
    assert _paths(await run("find_files", glob="./*.md")) == ["README.md"]
    assert _paths(await run("find_files", glob="src/*_test.py")) == ["src/app_test.py"]
    assert _paths(await run("find_files", glob="src/**/*.py")) == [
        "src/app.py",
        "src/app_test.py",
        "src/pkg/mod.py",
    ]


async def test_find_by_size(tree: Path, run: Run) -> None:
    assert _paths(await run("find_files", min_size=100)) == ["src/pkg/mod.py"]
    assert _paths(await run("find_files", glob="src/**", max_size=10)) == [
        "src/app.py",
        "src/pkg/data.bin",
    ]
    # Sizes are of files: with a size filter no directory is listed.
    assert _paths(await run("find_files", type="any", glob="src/**", min_size=0)) == [
        "src/app.py",
        "src/app_test.py",
        "src/pkg/data.bin",
        "src/pkg/mod.py",
    ]
    refused = await run("find_files", min_size=10, max_size=5)
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS


def _age(tree: Path) -> None:
    """Every entry last modified in 2020, except src/app.py at 2024-06-01 12:00 UTC."""
    old = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    for path in tree.rglob("*"):
        os.utime(path, (old, old), follow_symlinks=False)
    new = datetime(2024, 6, 1, 12, tzinfo=UTC).timestamp()
    os.utime(tree / "src/app.py", (new, new))


async def test_find_by_modification_time(tree: Path, run: Run) -> None:
    _age(tree)
    assert _paths(await run("find_files", modified_after="2024-01-01T00:00:00Z")) == ["src/app.py"]
    # Without an offset the time is UTC; with one it is honoured.
    assert _paths(await run("find_files", modified_after="2024-06-01T11:59:59")) == ["src/app.py"]
    assert _paths(await run("find_files", modified_after="2024-06-01T12:00:00")) == []
    assert _paths(await run("find_files", modified_after="2024-06-01T13:59:59+02:00")) == [
        "src/app.py"
    ]
    assert len(_paths(await run("find_files", modified_after="2019-12-31"))) == 7
    refused = await run("find_files", modified_after="last tuesday")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_max_results_cuts_the_list_and_keeps_counting(tree: Path, run: Run) -> None:
    data = _data(await run("find_files", max_results=2))
    assert [entry["path"] for entry in data["entries"]] == [".env", "README.md"]
    assert data["total"] == 7
    assert data["returned"] == 2
    assert data["truncated"] is True
    assert data["complete"] is True
    assert "first 2 of 7" in data["note"]
    too_many = await run("find_files", max_results=201)
    assert too_many.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_the_walk_stops_at_its_visit_cap_and_says_so(tree: Path) -> None:
    run = _runner(tree, max_visited=4)
    data = _data(await run("find_files", type="any"))
    assert data["visited"] == 4
    assert data["complete"] is False
    assert data["truncated"] is True
    assert "stopped after 4 entries" in data["note"]


async def test_the_walk_stops_near_its_deadline(root: Path) -> None:
    for index in range(300):
        _write(root, f"f{index:03}.txt", "x")
    find = _tools(root)["find_files"]
    data = await _direct(find, _context(0.1))
    assert data["complete"] is False
    assert data["total"] < 300
    assert "time limit" in data["note"]
    assert (await _direct(find, _context(60)))["total"] == 300


async def test_a_missing_start_directory_is_an_empty_answer(tree: Path, run: Run) -> None:
    data = _data(await run("find_files", glob="nowhere/**/*.py"))
    assert data["entries"] == []
    assert data["total"] == 0
    refused = await run("find_files", glob="README.md/*")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    ignored = await run("find_files", glob=".git/**")
    assert ignored.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_hidden_names_can_be_left_out(tree: Path) -> None:
    _write(tree, ".github/workflows/ci.yml", "on: push\n")
    run = _runner(tree, list_hidden=False)
    data = _data(await run("find_files"))
    assert all(
        not part.startswith(".") for p in _paths(await run("find_files")) for part in p.split("/")
    )
    assert data["skipped"] == {"hidden": 2, "ignored": 1}


async def test_names_the_model_could_not_use_are_counted_not_listed(root: Path, run: Run) -> None:
    _write(root, "fine.txt", "x")
    _write(root, "line\nbreak.txt", "x")
    _write(root, "evil\u202etxt.exe", "x")
    os.close(os.open(os.fsencode(root) + b"/latin\xff.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    data = _data(await run("find_files"))
    assert _paths(await run("find_files")) == ["fine.txt"]
    assert data["skipped"] == {"unsafe_names": 3}


async def test_the_walk_goes_no_deeper_than_its_limit(root: Path) -> None:
    _write(root, "a/b/c/d/deep.txt", "x")
    _write(root, "a/top.txt", "x")
    data = _data(await _runner(root, max_depth=2)("find_files"))
    assert [entry["path"] for entry in data["entries"]] == ["a/top.txt"]
    assert data["skipped"] == {"too_deep": 1}


# --- read_file ------------------------------------------------------------------------------


async def test_a_small_file_is_read_whole_with_line_numbers(root: Path, run: Run) -> None:
    _write(root, "src/a.txt", "one\ntwo\nthree\n")
    data = _data(await run("read_file", path="src/a.txt"))
    assert data == {
        "path": "src/a.txt",
        "encoding": "utf-8",
        "size": 14,
        "first_line": 1,
        "lines": ["one", "two", "three"],
        "total_lines": 3,
        "truncated": False,
        "ends_with_newline": True,
    }


async def test_a_line_range_is_read_and_says_where_to_continue(root: Path, run: Run) -> None:
    _write(root, "n.txt", "".join(f"row {i}\n" for i in range(1, 101)))
    data = _data(await run("read_file", path="n.txt", start_line=10, max_lines=5))
    assert data["first_line"] == 10
    assert data["lines"] == [f"row {i}" for i in range(10, 15)]
    assert data["truncated"] is True
    assert data["next_start_line"] == 15
    assert data["total_lines"] == 100
    last = _data(await run("read_file", path="n.txt", start_line=98))
    assert last["lines"] == ["row 98", "row 99", "row 100"]
    assert last["truncated"] is False
    past = await run("read_file", path="n.txt", start_line=101)
    assert past.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "has 100 lines" in past.summary


async def test_the_reply_budget_ends_a_read_and_the_rest_follows_exactly(root: Path) -> None:
    lines = [f"line {i} " + "x" * 40 for i in range(1, 61)]
    _write(root, "f.txt", "\n".join(lines))
    run = _runner(root, max_read_chars=500)
    seen: list[str] = []
    start = 1
    while True:
        data = _data(await run("read_file", path="f.txt", start_line=start))
        assert data["first_line"] == start
        seen += data["lines"]
        if not data["truncated"]:
            break
        assert "continue with next_start_line" in data["note"]
        start = data["next_start_line"]
    assert seen == lines
    assert start > 5  # really paged


async def test_tail_reads_the_last_lines(root: Path, run: Run) -> None:
    _write(root, "log.txt", "".join(f"entry {i}\n" for i in range(1, 11)))
    data = _data(await run("read_file", path="log.txt", tail=3))
    assert data["lines"] == ["entry 8", "entry 9", "entry 10"]
    assert data["first_line"] == 8
    assert data["total_lines"] == 10
    assert data["truncated"] is True
    everything = _data(await run("read_file", path="log.txt", tail=50))
    assert everything["first_line"] == 1
    assert len(everything["lines"]) == 10
    assert everything["truncated"] is False
    both = await run("read_file", path="log.txt", tail=3, start_line=2)
    assert both.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_a_tail_over_the_reply_budget_keeps_the_last_lines(root: Path) -> None:
    _write(root, "log.txt", "".join(f"entry {i} {'y' * 50}\n" for i in range(1, 101)))
    data = _data(await _runner(root, max_read_chars=400)("read_file", path="log.txt", tail=40))
    assert data["lines"][-1].startswith("entry 100 ")
    assert len(data["lines"]) < 40
    assert data["first_line"] == 101 - len(data["lines"])
    assert "only the last" in data["note"]


@pytest.fixture
def big(root: Path) -> Path:
    """A file over the 64 KiB limit these tests configure: 20,000 numbered lines."""
    return _write(root, "big.log", "".join(f"{i:06} event\n" for i in range(1, 20_001)))


async def test_a_large_file_is_not_read_whole_and_the_refusal_points_on(
    big: Path, root: Path
) -> None:
    run = _runner(root, max_file_bytes=64 * 1024)
    refused = await run("read_file", path="big.log")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    for hint in ("workspace.search_text", "start_line", "tail"):
        assert hint in refused.summary


async def test_a_large_file_is_read_by_range_and_tail_without_counting_it(
    big: Path, root: Path
) -> None:
    run = _runner(root, max_file_bytes=64 * 1024)
    tail = _data(await run("read_file", path="big.log", tail=50))
    assert tail["lines"] == [f"{i:06} event" for i in range(19_951, 20_001)]
    assert tail["first_line"] is None
    assert tail["total_lines"] is None
    assert tail["truncated"] is True
    assert "Line numbers are unknown" in tail["note"]
    middle = _data(await run("read_file", path="big.log", start_line=12_345, max_lines=3))
    assert middle["lines"] == ["012345 event", "012346 event", "012347 event"]
    assert middle["total_lines"] is None
    assert "unknown" in middle["note"]
    end = _data(await run("read_file", path="big.log", start_line=19_999))
    assert end["total_lines"] == 20_000
    assert end["ends_with_newline"] is True
    past = await run("read_file", path="big.log", start_line=20_001)
    assert past.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_reading_far_into_a_huge_file_stops_at_the_deadline(big: Path, root: Path) -> None:
    read = _tools(root, max_file_bytes=1024)["read_file"]
    with pytest.raises(ToolFailed):
        await _direct(read, _context(0.1), path="big.log", start_line=19_000)
    with pytest.raises(ToolFailed):
        await _direct(read, _context(0.1), path="big.log", tail=5)


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("naïve café\nligne 2\n".encode(), "utf-8"),
        (codecs.BOM_UTF8 + "naïve café\nligne 2\n".encode(), "utf-8 (BOM)"),
        (codecs.BOM_UTF16_LE + "naïve café\nligne 2\n".encode("utf-16-le"), "utf-16-le (BOM)"),
        (codecs.BOM_UTF16_BE + "naïve café\nligne 2\n".encode("utf-16-be"), "utf-16-be (BOM)"),
        (codecs.BOM_UTF32_LE + "naïve café\nligne 2\n".encode("utf-32-le"), "utf-32-le (BOM)"),
    ],
)
async def test_unicode_encodings_are_detected(
    root: Path, run: Run, data: bytes, encoding: str
) -> None:
    _write(root, "t.txt", data)
    read = _data(await run("read_file", path="t.txt"))
    assert read["lines"] == ["naïve café", "ligne 2"]
    assert read["encoding"] == encoding
    tail = _data(await run("read_file", path="t.txt", tail=1))
    assert tail["lines"] == ["ligne 2"]
    assert tail["first_line"] == 2


async def test_latin_1_text_is_detected_and_decoded(root: Path, run: Run) -> None:
    text = "Le café est très bon. Müller, naïve, façade, garçon, élève.\n" * 20
    _write(root, "fr.txt", text.encode("latin-1"))
    data = _data(await run("read_file", path="fr.txt", max_lines=1))
    assert data["lines"] == ["Le café est très bon. Müller, naïve, façade, garçon, élève."]
    assert data["encoding"] == "cp1252"
    assert "guessed" in data["note"]


async def test_gbk_chinese_is_detected_and_decoded(root: Path, run: Run) -> None:
    text = "中华人民共和国是一个位于东亚的国家。这是一个测试文件。用于检测编码。\n" * 30
    _write(root, "zh.txt", text.encode("gbk"))
    data = _data(await run("read_file", path="zh.txt", tail=2))
    assert (
        data["lines"]
        == ["中华人民共和国是一个位于东亚的国家。这是一个测试文件。用于检测编码。"] * 2
    )
    assert data["encoding"] == "gb18030"
    assert data["first_line"] == 29


async def test_an_encoding_can_be_named(root: Path, run: Run) -> None:
    _write(root, "le.txt", "première\nseconde\n".encode("utf-16-le"))
    refused = await run("read_file", path="le.txt")  # NUL bytes and no BOM: binary
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    data = _data(await run("read_file", path="le.txt", encoding="utf-16le"))
    assert data["lines"] == ["première", "seconde"]
    assert data["encoding"] == "utf-16-le"
    utf16 = _data(await run("read_file", path="le.txt", encoding="UTF-16"))
    assert utf16["lines"] == ["première", "seconde"]
    _write(root, "bom.txt", codecs.BOM_UTF16_BE + "x\ny\n".encode("utf-16-be"))
    assert _data(await run("read_file", path="bom.txt", encoding="utf-16"))["lines"] == ["x", "y"]
    _write(root, "sig.txt", codecs.BOM_UTF8 + b"z\n")
    assert _data(await run("read_file", path="sig.txt", encoding="utf-8-sig"))["lines"] == ["z"]
    latin = _data(await run("read_file", path="sig.txt", encoding="latin-1"))
    assert latin["lines"] == ["\xef\xbb\xbfz"]


@pytest.mark.parametrize("encoding", ["klingon", "rot13", "base64", "unicode_escape", "hex"])
async def test_unknown_or_non_text_encodings_are_refused(
    root: Path, run: Run, encoding: str
) -> None:
    _write(root, "a.txt", "a\n")
    envelope = await run("read_file", path="a.txt", encoding=encoding)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


async def test_utf16_newlines_are_found_only_on_code_unit_boundaries(root: Path, run: Run) -> None:
    # U+0A05 then U+0100 encode (LE) as 05 0A 00 01: a "0A 00" newline at an odd offset.
    lines = [f"{i} \u0a05\u0100 end" for i in range(1, 200)]
    _write(root, "g.txt", codecs.BOM_UTF16_LE + "\n".join(lines).encode("utf-16-le"))
    assert _data(await run("read_file", path="g.txt", tail=2))["lines"] == lines[-2:]
    middle = _data(await run("read_file", path="g.txt", start_line=150, max_lines=2))
    assert middle["lines"] == lines[149:151]
    assert middle["total_lines"] == 199
    small = _runner(root, max_file_bytes=100)
    assert _data(await small("read_file", path="g.txt", tail=1))["lines"] == lines[-1:]


async def test_binary_files_are_refused(root: Path, run: Run) -> None:
    _write(root, "img.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    refused = await run("read_file", path="img.png")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "binary" in refused.summary
    rng = random.Random(7)  # noqa: S311 - reproducible test data, not a secret
    noise = bytes(rng.randrange(1, 256) for _ in range(4000))  # no NUL byte at all
    _write(root, "noise.bin", noise)
    refused = await run("read_file", path="noise.bin")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "binary" in refused.summary


async def test_text_full_of_control_characters_is_binary(root: Path, run: Run) -> None:
    _write(root, "ctl.dat", b"\x01\x02\x03\x04 ok\n" * 100)  # valid UTF-8, yet not text
    refused = await run("read_file", path="ctl.dat")
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "control characters" in refused.summary
    _write(root, "ansi.log", "\x1b[31mred\x1b[0m\tdone\b\n" * 100)  # terminal logs are text
    assert _data(await run("read_file", path="ansi.log", max_lines=1))["lines"] == [
        "\x1b[31mred\x1b[0m\tdone\b"
    ]


async def test_a_utf16_file_cut_mid_code_unit_still_reads(root: Path, run: Run) -> None:
    _write(root, "odd.txt", codecs.BOM_UTF16_LE + "ab\ncd".encode("utf-16-le") + b"e")
    data = _data(await run("read_file", path="odd.txt"))
    assert data["lines"] == ["ab", "cd\ufffd"]
    assert data["ends_with_newline"] is False


def test_a_modification_time_beyond_the_calendar_is_shown_as_unknown() -> None:
    assert timestamp(1e20) is None
    assert timestamp(0) == "1970-01-01T00:00:00Z"


async def test_crlf_line_ends_are_not_part_of_the_lines(root: Path, run: Run) -> None:
    _write(root, "w.txt", b"one\r\ntwo\r\nin\rside\r\n")
    data = _data(await run("read_file", path="w.txt"))
    assert data["lines"] == ["one", "two", "in\rside"]
    assert data["total_lines"] == 3
    assert _data(await run("read_file", path="w.txt", tail=1))["lines"] == ["in\rside"]


@pytest.mark.parametrize(
    ("content", "lines", "ends"),
    [
        (b"", [], False),
        (b"\n", [""], True),
        (b"last", ["last"], False),
        (b"a\nlast", ["a", "last"], False),
        (b"a\n\n", ["a", ""], True),
    ],
)
async def test_edges_of_files(
    root: Path, run: Run, content: bytes, lines: list[str], *, ends: bool
) -> None:
    _write(root, "e.txt", content)
    data = _data(await run("read_file", path="e.txt"))
    assert data["lines"] == lines
    assert data["total_lines"] == len(lines)
    assert data["ends_with_newline"] is ends
    tail = _data(await run("read_file", path="e.txt", tail=1))
    assert tail["lines"] == lines[-1:]


async def test_an_empty_file_has_no_line_two(root: Path, run: Run) -> None:
    _write(root, "e.txt", b"")
    assert _data(await run("read_file", path="e.txt", start_line=1))["lines"] == []
    refused = await run("read_file", path="e.txt", start_line=2)
    assert refused.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "has 0 lines" in refused.summary


async def test_long_lines_are_cut_and_named(root: Path) -> None:
    _write(root, "min.js", "short\n" + "x" * 10_000 + "\nafter\n" + "é" * 5000)
    run = _runner(root, max_line_chars=100)
    data = _data(await run("read_file", path="min.js"))
    assert data["lines"] == ["short", "x" * 100, "after", "é" * 100]
    assert data["cut_lines"] == [2, 4]
    assert "cut" in data["note"]
    tail = _data(
        await _runner(root, max_line_chars=100, max_file_bytes=10)(
            "read_file", path="min.js", tail=3
        )
    )
    assert tail["lines"] == ["x" * 100, "after", "é" * 100]
    assert "cut_lines" not in tail  # line numbers of a tail of a large file are unknown


async def test_things_that_are_not_readable_files_are_refused(root: Path, run: Run) -> None:
    _write(root, "src/a.txt", "a")
    _write(root, ".git/config", "[core]\n")
    for path in ("src", ".", "./src/", ".git/config", ".GIT/config", "missing.txt"):
        envelope = await run("read_file", path=path)
        expected = ErrorCode.NOT_FOUND if path == "missing.txt" else ErrorCode.INVALID_ARGUMENTS
        assert envelope.error_type is expected, path


# --- property: ranges and tails agree with a plain split -----------------------------------


_LINE = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"),
    max_size=12,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_LINE, max_size=30),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-16-le", "utf-32-be", "gb18030"]),
    start=st.integers(1, 32),
    count=st.integers(1, 10),
    tail=st.integers(1, 40),
    limit=st.sampled_from([64, 1 << 20]),
)
def test_ranges_and_tails_match_a_plain_split(
    lines: list[str],
    *,
    crlf: bool,
    final_newline: bool,
    encoding: str,
    start: int,
    count: int,
    tail: int,
    limit: int,
) -> None:
    if encoding == "gb18030":
        lines = [line.encode("gb18030", "ignore").decode("gb18030") for line in lines]
    if final_newline and lines:
        expected = lines
        text = "".join(line + ("\r\n" if crlf else "\n") for line in lines)
    else:
        expected = lines if lines and lines[-1] else lines[:-1]
        text = ("\r\n" if crlf else "\n").join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "p.txt").write_bytes(text.encode(encoding))
        workspace = Workspace(tmp)
        config = WorkspaceConfig(root=Path(tmp), max_file_bytes=limit, max_read_chars=1 << 20)

        def read(**options: Any) -> dict[str, Any]:
            request = _ReadRequest(
                path="p.txt",
                start_line=options.get("start_line"),
                max_lines=options.get("max_lines"),
                tail=options.get("tail"),
                encoding=encoding,
            )
            return _read(workspace, config, request, _context(60), "workspace")

        got = read(tail=tail)
        assert got["lines"] == expected[-tail:] if expected else got["lines"] == []
        if start <= max(len(expected), 1):
            ranged = read(start_line=start, max_lines=count)
            assert ranged["lines"] == expected[start - 1 : start - 1 + count]
            assert ranged["first_line"] == start
            if limit > len(text) * 4:
                assert ranged["total_lines"] == len(expected)
        else:
            with pytest.raises(InvalidArgument):
                read(start_line=start, max_lines=count)
