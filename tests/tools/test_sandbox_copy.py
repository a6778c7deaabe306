"""The sandbox's workspace copy: what it copies, what it leaves out, and races it survives.

Races are made deterministic: the listing or the kind check of one name is wrapped so
that the name is swapped (for a link, a pipe, a hard-linked file) exactly between the
check and the open, which is the window a concurrent writer would aim for.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from handrail.errors import ConfigurationError
from handrail.tools import _sandbox_files, _sandbox_identity
from handrail.tools._sandbox_files import CopyFull, LeftOut, copy_tree, workspace_changes
from handrail.tools._sandbox_identity import as_user

pytestmark = pytest.mark.anyio

ROOT = os.geteuid() == 0
NOBODY = (65534, 65534)


@contextmanager
def _fds(*paths: Path) -> Iterator[tuple[int, ...]]:
    fds = tuple(os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in paths)
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _copy(source: Path, target: Path, **options: Any) -> LeftOut:
    target.mkdir(exist_ok=True)
    with _fds(source, target) as (src, dst):
        return copy_tree(src, dst, **options)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.txt").write_text("beta\n")
    (root / "sub" / "deep" / "c.txt").write_text("gamma\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o4755)
    (root / "link").symlink_to("sub/b.txt")
    (root / "dangling").symlink_to("/nowhere/at/all")
    (root / "skip.log").write_text("ignored\n")
    return root


def test_files_directories_and_links_are_copied_with_modes_kept_or_narrowed(
    tree: Path,
    tmp_path: Path,
) -> None:
    target = tmp_path / "copy"
    left_out = _copy(tree, target, ignore=("*.log",))
    assert left_out == LeftOut()
    assert (target / "sub" / "deep" / "c.txt").read_text() == "gamma\n"
    assert (target / "link").readlink() == Path("sub/b.txt")
    assert (target / "dangling").readlink() == Path("/nowhere/at/all")
    assert stat.S_IMODE((target / "run.sh").stat().st_mode) == 0o755  # no setuid
    assert (target / "a.txt").stat().st_mtime_ns == (tree / "a.txt").stat().st_mtime_ns
    assert not (target / "skip.log").exists()
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(tree.stat().st_mode)


def test_hard_links_pipes_and_sockets_are_left_out_and_listed(
    tree: Path,
    tmp_path: Path,
) -> None:
    (tmp_path / "outside.txt").write_text("outside\n")
    os.link(tmp_path / "outside.txt", tree / "sub" / "hard.txt")
    os.mkfifo(tree / "pipe")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tree / "sock"))
        left_out = _copy(tree, tmp_path / "copy")
    assert left_out.hard_links == ("sub/hard.txt",)
    assert left_out.special == ("pipe", "sock")
    assert left_out.paths == {"sub/hard.txt", "pipe", "sock"}
    assert not (tmp_path / "copy" / "sub" / "hard.txt").exists()
    allowed = _copy(tree, tmp_path / "copy2", allow_hardlinks=True)
    assert allowed.hard_links == ()
    assert (tmp_path / "copy2" / "sub" / "hard.txt").read_text() == "outside\n"


def test_only_so_many_paths_are_listed_and_the_rest_is_said(tree: Path, tmp_path: Path) -> None:
    for name in ("p1", "p2", "p3"):
        os.mkfifo(tree / name)
    left_out = _copy(tree, tmp_path / "copy", limit=2)
    assert left_out.special == ("p1", "p2")
    assert left_out.truncated


@pytest.mark.skipif(not ROOT, reason="acting as another user needs root")
async def test_as_the_sandbox_user_what_it_may_not_read_is_left_out(
    tree: Path,
    tmp_path: Path,
) -> None:
    (tree / "secret.txt").write_text("root only\n")
    (tree / "secret.txt").chmod(0o600)
    (tree / "sub" / "deep").chmod(0o700)
    (tree / "listable").mkdir()
    (tree / "listable").chmod(0o711)  # passable, but not listable
    target = tmp_path / "copy"
    target.mkdir()
    os.chown(target, *NOBODY)
    with _fds(tree, target) as (src, dst):
        left_out = await as_user(NOBODY, copy_tree, src, dst)
    assert left_out.unreadable == ("listable", "secret.txt", "sub/deep")
    assert not (target / "secret.txt").exists()
    assert (target / "sub" / "b.txt").stat().st_uid == NOBODY[0]
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    target2 = tmp_path / "copy2"
    target2.mkdir()
    os.chown(target2, *NOBODY)
    with _fds(closed, target2) as (src, dst):
        assert await as_user(NOBODY, copy_tree, src, dst) == LeftOut(unreadable=(".",))


@pytest.mark.skipif(not ROOT, reason="acting as another user needs root")
async def test_a_thread_acting_as_the_user_leaves_the_process_as_it_was() -> None:
    def identity() -> tuple[str, str]:
        status = Path(f"/proc/self/task/{_native_id()}/status").read_text().splitlines()
        uid = next(line for line in status if line.startswith("Uid:")).split()
        groups = next(line for line in status if line.startswith("Groups:")).split()
        return uid[4], " ".join(groups[1:])

    assert await as_user(NOBODY, identity) == (str(NOBODY[0]), "")
    assert os.getuid() == os.geteuid() == 0
    assert identity()[0] == "0"


def _native_id() -> int:
    return threading.get_native_id()


async def test_a_failure_in_the_thread_reaches_the_caller() -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await as_user(None, fail)
    assert await as_user(None, lambda: 7) == 7


async def test_a_machine_without_a_known_setgroups_call_refuses_to_act_as_the_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_identity, "_SETGROUPS", {})
    with pytest.raises(ConfigurationError):
        await as_user(NOBODY, lambda: None)


@pytest.mark.skipif(ROOT, reason="root may take any identity")
async def test_without_the_right_to_switch_the_thread_fails_instead_of_copying() -> None:
    with pytest.raises(OSError):  # noqa: PT011 - the kernel's refusal, whatever its number
        await as_user(NOBODY, lambda: None)


# --- races, made deterministic ----------------------------------------------------------


Swap = Callable[[Path], None]


def _swap_after_check(monkeypatch: pytest.MonkeyPatch, name: str, swap: Swap, root: Path) -> None:
    """When the copy looks at `name` (lstat), swap it with `swap` before it is opened."""
    real = os.stat

    def looked(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real(path, *args, **kwargs)
        if path == name and kwargs.get("dir_fd") is not None:
            swap(root / name)
        return result

    monkeypatch.setattr(_sandbox_files.os, "stat", looked)


def _to_link(target: Path) -> Swap:
    def swap(path: Path) -> None:
        path.rename(path.with_name(path.name + ".parked"))
        path.symlink_to(target)

    return swap


def test_a_directory_swapped_for_a_link_after_its_check_is_not_followed(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside\n")
    _swap_after_check(monkeypatch, "sub", _to_link(outside), tree)
    _copy(tree, tmp_path / "copy")
    copied = {p.name for p in (tmp_path / "copy").rglob("*")}
    assert "secret.txt" not in copied


def test_a_file_swapped_for_a_link_after_its_check_is_not_followed(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "secret.txt").write_text("outside\n")
    _swap_after_check(monkeypatch, "a.txt", _to_link(tmp_path / "secret.txt"), tree)
    _copy(tree, tmp_path / "copy")
    assert not (tmp_path / "copy" / "a.txt").exists()


def test_a_file_swapped_for_a_pipe_or_a_hard_link_is_judged_by_what_was_opened(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "outside.txt").write_text("outside\n")

    def to_pipe(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    def to_hard_link(path: Path) -> None:
        path.unlink()
        os.link(tmp_path / "outside.txt", path)

    _swap_after_check(monkeypatch, "a.txt", to_pipe, tree)
    assert _copy(tree, tmp_path / "copy").special == ("a.txt",)
    (tree / "a.txt").unlink()
    (tree / "a.txt").write_text("alpha\n")
    _swap_after_check(monkeypatch, "a.txt", to_hard_link, tree)
    assert _copy(tree, tmp_path / "copy2").hard_links == ("a.txt",)
    assert not (tmp_path / "copy2" / "a.txt").exists()


def test_names_that_vanish_or_change_kind_while_copying_are_skipped(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def to_file(path: Path) -> None:
        path.unlink()
        path.write_text("now a file\n")

    _swap_after_check(monkeypatch, "link", to_file, tree)
    left_out = _copy(tree, tmp_path / "copy")
    assert left_out == LeftOut()
    assert not (tmp_path / "copy" / "link").exists()
    monkeypatch.undo()

    real = os.stat

    def vanished(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "a.txt" and kwargs.get("dir_fd") is not None:
            raise FileNotFoundError(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_sandbox_files.os, "stat", vanished)
    _copy(tree, tmp_path / "copy3")
    assert not (tmp_path / "copy3" / "a.txt").exists()
    assert (tmp_path / "copy3" / "sub" / "b.txt").exists()


def test_a_full_target_stops_the_copy(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_space(*_args: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_sandbox_files.os, "sendfile", no_space)
    with pytest.raises(CopyFull):
        _copy(tree, tmp_path / "copy")


def test_changes_leave_out_what_the_copy_left_out(tree: Path, tmp_path: Path) -> None:
    os.mkfifo(tree / "pipe")
    target = tmp_path / "copy"
    left_out = _copy(tree, target)
    (target / "sub" / "b.txt").write_text("changed\n")
    (target / "new.txt").write_text("new\n")
    with _fds(tree, target) as (src, dst):
        changes = workspace_changes(src, dst, left_out=left_out, ignore=("*.log",))
    assert changes.modified == ("sub/b.txt",)
    assert changes.added == ("new.txt",)
    assert changes.deleted == ()


def test_a_changed_link_and_a_file_become_a_directory_are_changes(tmp_path: Path) -> None:
    left, right = tmp_path / "l", tmp_path / "r"
    for side in (left, right):
        (side / "d").mkdir(parents=True)
    (left / "d" / "l").symlink_to("a")
    (right / "d" / "l").symlink_to("b")
    (left / "d" / "same").write_text("x")
    (right / "d" / "same").write_text("x")
    with _fds(left, right) as (a, b):
        changes = workspace_changes(a, b)
    assert changes.modified == ("d/l",)


def test_an_unreadable_part_of_the_original_is_not_compared(tmp_path: Path) -> None:
    left, right = tmp_path / "l", tmp_path / "r"
    left.mkdir()
    right.mkdir()
    (left / "f").write_text("x")
    (right / "f").write_text("x")
    with _fds(left, right) as (a, b):
        assert _sandbox_files._same_content(a, b, "missing") is False
        assert _sandbox_files._read_link(a, "missing/x") is None
        assert _sandbox_files._read_link(a, "f") is None
        assert _sandbox_files._same_content(a, b, "f") is True


def test_a_thread_that_ends_after_its_loop_closed_ends_quietly() -> None:
    release = threading.Event()

    async def start() -> None:
        as_user(None, release.wait, 30)  # nobody awaits it

    asyncio.run(start())  # the loop is closed before the thread's work ends
    release.set()
    for thread in threading.enumerate():
        if thread.name == "handrail-sandbox-as-user":
            thread.join(timeout=30)
            assert not thread.is_alive()


@pytest.mark.parametrize(
    ("name", "call"), [("sub", "open"), ("a.txt", "open"), ("link", "readlink")]
)
def test_an_input_error_is_never_taken_for_a_vanished_name(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    call: str,
) -> None:
    real = getattr(os, call)

    def failing(path: Any, *args: Any, **kwargs: Any) -> Any:
        if path == name and kwargs.get("dir_fd") is not None:
            raise OSError(5, "Input/output error")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_sandbox_files.os, call, failing)
    with pytest.raises(OSError, match="Input/output"):
        _copy(tree, tmp_path / "copy")


def test_names_that_vanish_while_changes_are_listed_are_skipped(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = tmp_path / "copy"
    _copy(tree, target)
    real_stat, real_open = os.stat, os.open

    def vanished(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "a.txt" and kwargs.get("dir_fd") is not None:
            raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    def swapped(path: Any, *args: Any, **kwargs: Any) -> int:
        if path == "deep" and kwargs.get("dir_fd") is not None:
            raise OSError(40, "Too many levels of symbolic links")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_sandbox_files.os, "stat", vanished)
    monkeypatch.setattr(_sandbox_files.os, "open", swapped)
    with _fds(tree, target) as (src, dst):
        changes = workspace_changes(src, dst)
    assert changes == _sandbox_files.WorkspaceChanges(
        added=(), modified=(), deleted=(), truncated=False
    )


def test_a_file_missing_on_one_side_is_not_the_same(tmp_path: Path) -> None:
    left, right = tmp_path / "l", tmp_path / "r"
    left.mkdir()
    right.mkdir()
    (left / "f").write_text("x")
    with _fds(left, right) as (a, b):
        assert _sandbox_files._same_content(a, b, "f") is False


@pytest.mark.skipif(not ROOT, reason="acting as another user needs root")
async def test_a_directory_the_user_may_list_but_not_enter_lists_its_names_as_unreadable(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "list-only").mkdir(parents=True)
    (tree / "list-only" / "f.txt").write_text("x\n")
    (tree / "list-only").chmod(0o744)
    target = tmp_path / "copy"
    target.mkdir()
    os.chown(target, *NOBODY)
    with _fds(tree, target) as (src, dst):
        left_out = await as_user(NOBODY, copy_tree, src, dst)
    assert left_out.unreadable == ("list-only/f.txt",)


def test_a_target_too_full_for_a_directory_stops_the_copy(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_space(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    (tmp_path / "copy").mkdir()
    monkeypatch.setattr(_sandbox_files.os, "mkdir", no_space)
    with pytest.raises(CopyFull):
        _copy(tree, tmp_path / "copy")


def test_a_directory_that_cannot_be_listed_while_comparing_counts_as_empty(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = tmp_path / "copy"
    _copy(tree, target)
    (target / "sub" / "new.txt").write_text("new\n")
    real = _sandbox_files._names
    listed: list[int] = []

    def refusing(fd: int) -> list[str]:
        listed.append(fd)
        if os.fstat(fd).st_ino == (target / "sub").stat().st_ino:
            raise PermissionError(13, "Permission denied")
        return real(fd)

    monkeypatch.setattr(_sandbox_files, "_names", refusing)
    with _fds(tree, target) as (src, dst):
        changes = workspace_changes(src, dst)
    assert "sub/new.txt" not in changes.added
    assert "sub/b.txt" in changes.deleted
