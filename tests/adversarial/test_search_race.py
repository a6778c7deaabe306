"""A race against search_text: parts of the workspace swapped for symlinks to the outside.

While searches run, a thread keeps swapping a directory and a file of the workspace with
symbolic links to a directory and a file outside it (planted secret content), so that a
path that was checked is a link when ripgrep opens it, and a real file again when the
result is checked. Hundreds of attempts; the secret must never reach a result. The test
passes because the outside cannot be reached at all, not because the window is small:
however the swaps fall, nothing outside the workspace can be read where ripgrep runs:
with Landlock the outside exists but no rule lets it be opened; with bubblewrap it
does not exist. Both are tried.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from _needs import missing
from handrail import ErrorCode
from handrail.errors import InvalidArgument, NotFound
from handrail.tools._sandbox_confine import Mechanism, landlock_usable
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import SearchConfig, SearchResult, TextSearch

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
SECRET = "SECRET-c41b"  # noqa: S105 - planted content, not a credential
NEEDLE = "needle"
ATTEMPTS = 150
SCOPES: tuple[tuple[str, ...], ...] = ((), ("dir",), ("file.txt",), ("dir", "file.txt"))


@pytest.fixture
def rg() -> str:
    """The ripgrep binary; skips without one, fails instead under CI=true."""
    if RG is None:
        reason = "ripgrep (rg) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return RG


@dataclass(frozen=True, kw_only=True, slots=True)
class _Swap:
    """`name` in the workspace, and a symbolic link to the outside kept beside it."""

    name: str
    link: str
    parked: str


def _plant(tmp_path: Path) -> tuple[Path, tuple[_Swap, ...]]:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    secret_line = f"{NEEDLE} {SECRET} outside\n"
    for name in ("a.txt", "b.txt", "c.txt"):
        (outside / name).write_text(secret_line * 3)
        (outside / "sub" / name).write_text(secret_line)
    (outside / "secret.txt").write_text(secret_line * 3)
    root = tmp_path / "ws"
    (root / "dir" / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / "dir" / name).write_text(f"{NEEDLE} inside\n" * 3)
        (root / "dir" / "sub" / name).write_text(f"{NEEDLE} inside\n")
    (root / "file.txt").write_text(f"{NEEDLE} inside\n")
    (root / "stable.txt").write_text(f"{NEEDLE} always here\n")
    swaps = (
        _Swap(name="dir", link="dir.link", parked="dir.parked"),
        _Swap(name="file.txt", link="file.link", parked="file.parked"),
    )
    # Absolute and relative links: either kind must lead nowhere.
    (root / "dir.link").symlink_to(outside)
    (root / "file.link").symlink_to(Path("..") / "outside" / "secret.txt")
    return root, swaps


@contextlib.contextmanager
def _swapping(root: Path, swaps: tuple[_Swap, ...]) -> Iterator[threading.Event]:
    """A thread that swaps each name with its link and back until the block ends.

    Yields an event set once the thread has made its first full round of swaps.
    """
    stop = threading.Event()
    started = threading.Event()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)

    def swap() -> None:
        while not stop.is_set():
            for item in swaps:
                # name -> parked, link -> name (now a link), name -> link, parked -> name.
                os.rename(item.name, item.parked, src_dir_fd=fd, dst_dir_fd=fd)
                os.rename(item.link, item.name, src_dir_fd=fd, dst_dir_fd=fd)
                os.rename(item.name, item.link, src_dir_fd=fd, dst_dir_fd=fd)
                os.rename(item.parked, item.name, src_dir_fd=fd, dst_dir_fd=fd)
            started.set()

    thread = threading.Thread(target=swap, name="swapper", daemon=True)
    thread.start()
    try:
        yield started
    finally:
        stop.set()
        thread.join(timeout=30)
        os.close(fd)
    assert not thread.is_alive()


def _texts(result: SearchResult) -> Iterator[str]:
    for match in result.matches:
        yield match.path
        yield match.text
        for line in (*match.before, *match.after):
            yield line.text


def _available(confinement: Mechanism) -> None:
    usable = landlock_usable() if confinement == "landlock" else shutil.which("bwrap") is not None
    if not usable:
        missing(f"{confinement} cannot confine on this host")


@pytest.mark.parametrize("confinement", ["landlock", "bubblewrap"])
async def test_swapping_parts_of_the_workspace_for_links_never_reveals_the_outside(
    rg: str,
    tmp_path: Path,
    confinement: Mechanism,
) -> None:
    _available(confinement)
    root, swaps = _plant(tmp_path)
    config = SearchConfig(rg=rg, timeout=60, confinement=confinement)
    search = TextSearch(Workspace(root), config)
    assert search.confined_by == confinement
    leaks: list[str] = []
    refused: list[ErrorCode] = []
    with _swapping(root, swaps) as started:
        assert started.wait(timeout=30)
        for attempt in range(ATTEMPTS):
            scope = SCOPES[attempt % len(SCOPES)]
            try:
                # No scope: the whole workspace is walked (stable.txt included).
                paths = (*scope, "stable.txt") if scope else ()
                result = await search.search(NEEDLE, paths=paths, context=1)
            except (InvalidArgument, NotFound) as exc:
                # A path that is a link (or missing) when it is checked is refused: fine.
                refused.append(exc.code)
                continue
            assert any(m.path == "stable.txt" for m in result.matches)
            leaks += [text for text in _texts(result) if SECRET in text]
    assert leaks == []
    assert set(refused) <= {ErrorCode.INVALID_ARGUMENTS, ErrorCode.NOT_FOUND}
    assert len(refused) < ATTEMPTS
