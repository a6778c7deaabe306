"""Attacks on the workspace read tools: escapes by path, link, name, race and glob.

Every attack goes through a real Gate as a model's ToolCall. Files outside the root
hold a canary string; no envelope may ever contain it, nor the host path of the test
directory. A file inside the root holds a twin canary that must come back, so the
check cannot pass by masking.
"""

from __future__ import annotations

import contextlib
import os
import unicodedata
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.envelope import Envelope
from handrail.testing import MemoryAuditSink, sequential_ids
from handrail.tools.workspace import _finder
from handrail.tools.workspace.files import WorkspaceConfig, read_tools
from handrail.tools.workspace.paths import Workspace

pytestmark = pytest.mark.anyio

CANARY = "canary_outside_marker"
INSIDE = "canary_inside_marker"
USER = Principal(user_id="mallory", tenant_id="t")


class Attacker:
    """Sends calls through a gate and keeps every envelope's JSON for the final sweep."""

    def __init__(self, gate: Gate, host: Path) -> None:
        self._gate = gate
        self._host = str(host)
        self.seen: list[str] = []
        self._ids = sequential_ids("call")

    async def __call__(
        self, tool: str, *, timeout: float | None = None, **arguments: object
    ) -> Envelope:
        call = ToolCall(id=self._ids(), name=f"workspace.{tool}", arguments=arguments)
        envelope = await self._gate.handle(call, USER, timeout=timeout)
        text = envelope.to_json()
        self.seen.append(text)
        assert CANARY not in text
        assert self._host not in text  # no host path, inside or outside the root
        return envelope

    async def refused(self, tool: str, code: ErrorCode, **arguments: object) -> Envelope:
        envelope = await self(tool, timeout=None, **arguments)
        assert envelope.status is Status.ERROR, envelope.summary
        assert envelope.error_type is code, (arguments, envelope.summary)
        return envelope


Attack = Callable[..., Awaitable[Envelope]]


@pytest.fixture(params=[True, False], ids=["openat2", "component_by_component"])
def use_openat2(request: pytest.FixtureRequest, tmp_path: Path) -> bool:
    wanted: bool = request.param
    if wanted and not Workspace(tmp_path).uses_openat2:
        pytest.skip("this kernel has no openat2; the component-by-component path is tested")
    return wanted


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """tmp/outside holds canaries; tmp/ws is the root, full of ways out."""
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(f"{CANARY} secret\n")
    (outside / "dir" / "inner.txt").write_text(f"{CANARY} inner\n")
    (outside / "dir" / "file.txt").write_text(f"{CANARY} swapped in\n")
    (outside / "hard.txt").write_text(f"{CANARY} hard\n")
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "d").mkdir()
    (root / "inside.txt").write_text(f"{INSIDE} ok\n")
    (root / "d" / "file.txt").write_text("harmless\n")
    (root / "link_passwd").symlink_to("/etc/passwd")
    (root / "link_secret").symlink_to("../outside/secret.txt")
    (root / "link_abs").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside / "dir")
    (root / "link_root").symlink_to("/")
    (root / "link_proc").symlink_to("/proc/self/root")
    (root / "sub" / "link_up").symlink_to("../../outside")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "self_loop").symlink_to("self_loop")
    os.link(outside / "hard.txt", root / "hard.txt")  # same filesystem as the root
    (root / unicodedata.normalize("NFC", "café.txt")).write_text("nfc\n")
    os.mkfifo(root / "fifo")
    return root


@pytest.fixture
def attack(layout: Path, tmp_path: Path, *, use_openat2: bool) -> Iterator[Attacker]:
    registry = Registry()
    workspace = Workspace(layout, use_openat2=use_openat2)
    for item in read_tools(workspace, WorkspaceConfig(root=layout)):
        registry.register(item)
    gate = Gate(registry, audit=MemoryAuditSink(), new_id=sequential_ids())
    attacker = Attacker(gate, tmp_path)
    yield attacker
    # The final sweep: whatever was tried, no canary reached the model.
    assert attacker.seen
    assert not any(CANARY in text for text in attacker.seen)


async def test_the_canary_check_is_real_a_file_inside_comes_back(attack: Attacker) -> None:
    envelope = await attack("read_file", path="inside.txt")
    assert envelope.status is Status.OK
    assert INSIDE in envelope.to_json()


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "..",
        "./../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "d/../../outside/secret.txt",
        "/etc/passwd",
        "//etc/passwd",
        "~",
        "~/.ssh/id_rsa",
        "~root/.bashrc",
        "..\\outside\\secret.txt",
        "d\\..\\..\\outside\\secret.txt",
    ],
)
async def test_paths_that_climb_out_are_refused(attack: Attacker, path: str) -> None:
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=path)


async def test_an_absolute_path_to_the_outside_is_refused(attack: Attacker, tmp_path: Path) -> None:
    for target in (tmp_path / "outside" / "secret.txt", tmp_path / "ws" / "inside.txt"):
        await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=str(target))


@pytest.mark.parametrize(
    "path",
    [
        "link_passwd",
        "link_secret",
        "link_abs",
        "link_dir/inner.txt",
        "link_dir",
        "link_root/etc/passwd",
        "link_proc/etc/passwd",
        "sub/link_up/secret.txt",
        "sub/link_up/dir/inner.txt",
        "loop_a",
        "loop_b/x",
        "self_loop",
    ],
)
async def test_symbolic_links_are_never_followed(attack: Attacker, path: str) -> None:
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=path)


async def test_a_hard_link_to_a_file_outside_is_refused(attack: Attacker) -> None:
    envelope = await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path="hard.txt")
    assert "hard links" in envelope.summary


async def test_listing_never_enters_a_link_or_reveals_where_it_points(attack: Attacker) -> None:
    envelope = await attack("find_files", type="any")
    assert envelope.status is Status.OK
    entries = {entry["path"]: entry for entry in envelope.data["entries"]}
    for link in ("link_passwd", "link_dir", "link_root", "sub/link_up", "loop_a", "self_loop"):
        assert entries[link]["type"] == "symlink"
        assert set(entries[link]) == {"path", "type", "modified"}  # no target, no size
    assert entries["fifo"]["type"] == "other"
    assert not any(path.startswith(("link_dir/", "link_root/", "sub/link_up/")) for path in entries)
    assert "/etc" not in envelope.to_json()
    for glob in ("**/secret.txt", "**/inner.txt", "**/passwd", "*passwd*"):
        found = await attack("find_files", glob=glob)
        assert found.data["entries"] == [], glob


@pytest.mark.parametrize("glob", ["link_dir/**", "sub/link_up/**", "link_root/etc/*", "loop_a/*"])
async def test_a_glob_that_starts_inside_a_link_is_refused(attack: Attacker, glob: str) -> None:
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob=glob)


@pytest.mark.parametrize(
    "path",
    [
        "inside\x00.txt",
        "inside.txt\x00../../outside/secret.txt",
        "\x1b[2Jinside.txt",
        "inside\n.txt",
        "\u202etxt.edisni",
        "ins\u200bide.txt",
        "inside\u2028.txt",
        "\ufeffinside.txt",
    ],
)
async def test_nul_control_and_invisible_characters_are_refused(
    attack: Attacker, path: str
) -> None:
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=path)


async def test_lookalike_names_name_other_files_not_the_outside(attack: Attacker) -> None:
    nfc = await attack("read_file", path=unicodedata.normalize("NFC", "café.txt"))
    assert nfc.data["lines"] == ["nfc"]
    # NFD is a different name on Linux: it is not found, never silently normalised.
    nfd = unicodedata.normalize("NFD", "café.txt")
    await attack.refused("read_file", ErrorCode.NOT_FOUND, path=nfd)
    for path in (
        "\uff0e\uff0e/outside/secret.txt",  # fullwidth full stops
        "\uff0e\uff0e\uff0foutside\uff0fsecret.txt",  # and fullwidth solidus
        "\u2024\u2024/outside/secret.txt",  # one dot leaders
        "%2e%2e/outside/secret.txt",
    ):
        await attack.refused("read_file", ErrorCode.NOT_FOUND, path=path)
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob="\u202e*")


async def test_very_long_paths_are_refused_or_simply_not_found(attack: Attacker) -> None:
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path="a/" * 3000 + "x")
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path="x" * 256)
    await attack.refused("read_file", ErrorCode.NOT_FOUND, path="a/" * 2000 + "x")
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob="a/" * 300)


async def test_a_directory_swapped_for_a_link_between_two_calls_is_refused(
    attack: Attacker, layout: Path, tmp_path: Path
) -> None:
    first = await attack("read_file", path="d/file.txt")
    assert first.data["lines"] == ["harmless"]
    (layout / "d").rename(layout / "d_old")
    (layout / "d").symlink_to(tmp_path / "outside" / "dir")
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path="d/file.txt")
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path="d/inner.txt")
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob="d/**")
    listing = await attack("find_files", type="any", glob="d*/**")
    paths = [entry["path"] for entry in listing.data["entries"]]
    assert paths == ["d", "d_old", "d_old/file.txt"]
    assert listing.data["entries"][0]["type"] == "symlink"


async def test_a_directory_swapped_mid_walk_is_skipped_not_followed(
    attack: Attacker, layout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (layout / "vanishing.txt").write_text("soon gone\n")
    listed = _finder.Finder._list
    swapped: list[bool] = []

    def list_then_swap(self: _finder.Finder, fd: int) -> list[os.DirEntry[str]]:
        entries = listed(self, fd)
        if not swapped:
            swapped.append(True)
            (layout / "d").rename(layout / "d_old")
            (layout / "d").symlink_to(tmp_path / "outside" / "dir")
            (layout / "vanishing.txt").unlink()
        return entries

    monkeypatch.setattr(_finder.Finder, "_list", list_then_swap)
    envelope = await attack("find_files", type="any")
    data: dict[str, Any] = envelope.data
    assert swapped
    paths = [entry["path"] for entry in data["entries"]]
    assert not any(path.startswith("d/") for path in paths)
    assert "vanishing.txt" not in paths
    assert data["skipped"]["unreadable_dirs"] == 1
    assert data["skipped"]["vanished"] == 1


@pytest.mark.parametrize(
    "glob",
    [
        "**/" * 50 + "*",
        "/".join(["**"] * 5),
        "*{a,b}",
        "{a,b}{c,d}{e,f}{g,h}",
        "*a" * 30,
        "?" * 25,
        "[" * 100,
        "[[[[",
        "[!",
        "x" * 4000,
        "*" * 513,
    ],
)
async def test_glob_bombs_are_refused(attack: Attacker, glob: str) -> None:
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob=glob)


async def test_the_worst_allowed_glob_on_the_worst_names_still_answers(
    attack: Attacker, layout: Path
) -> None:
    for index in range(20):
        (layout / f"{'a' * 250}{index:02}").write_text("")
    glob = "*a" * 12 + "b"  # every star may backtrack over 252 characters
    envelope = await attack("find_files", glob=glob, type="any")
    assert envelope.status is Status.OK
    assert envelope.data["entries"] == []


@pytest.mark.parametrize("encoding", ["../../etc/passwd", "rot13", "unicode_escape", "x" * 41])
async def test_hostile_encodings_are_refused(attack: Attacker, encoding: str) -> None:
    await attack.refused(
        "read_file", ErrorCode.INVALID_ARGUMENTS, path="inside.txt", encoding=encoding
    )


async def test_a_fifo_is_refused_without_waiting_for_a_writer(
    attack: Attacker, layout: Path
) -> None:
    try:
        envelope = await attack("read_file", path="fifo", timeout=5)
    finally:
        # Were the reader stuck in open(), this would free it (bounding the test).
        with contextlib.suppress(OSError):  # ENXIO: nobody waits to read, as it should be
            os.close(os.open(layout / "fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "not a regular file" in envelope.summary


async def test_ignored_directories_cannot_be_read_or_listed(attack: Attacker, layout: Path) -> None:
    (layout / ".git").mkdir()
    (layout / ".git" / "config").write_text("[remote]\nurl = https://token@example.com/x\n")
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=".git/config")
    await attack.refused("read_file", ErrorCode.INVALID_ARGUMENTS, path=".Git/config")
    await attack.refused("find_files", ErrorCode.INVALID_ARGUMENTS, glob=".git/*")
    listing = await attack("find_files", glob="**/config")
    assert listing.data["entries"] == []
