"""Safe paths: opened beneath the root, never through a symbolic link, in both modes."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.errors import ConfigurationError, InvalidArgument, NotFound
from handrail.tools.workspace.paths import MAX_PATH_CHARS, Beneath, Workspace, WorkspaceFile

CANARY = "canary-outside-the-workspace"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("print('hi')\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(CANARY)
    (root / "to_file").symlink_to(outside / "secret.txt")
    (root / "to_dir").symlink_to(outside)
    (root / "src" / "inner_link").symlink_to("pkg")  # a link that stays inside
    (root / "loop").symlink_to("loop")
    os.link(outside / "secret.txt", root / "hard")
    return root


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def workspace(request: pytest.FixtureRequest, tree: Path) -> Workspace:
    use_openat2: bool = request.param
    ws = Workspace(tree, use_openat2=use_openat2)
    if use_openat2 and not ws.uses_openat2:  # pragma: no cover - old kernels
        pytest.skip("this kernel has no openat2")
    return ws


def _read(workspace: Workspace, path: str) -> str:
    fd = workspace.open(workspace.relative(path), os.O_RDONLY)
    with os.fdopen(fd) as handle:
        return handle.read()


def test_files_inside_open_and_dot_parts_are_dropped(workspace: Workspace) -> None:
    assert _read(workspace, "src/pkg/mod.py") == "print('hi')\n"
    assert _read(workspace, "./src//pkg/./mod.py") == "print('hi')\n"
    assert workspace.relative("src/./pkg/").text == "src/pkg"
    assert workspace.relative(".").text == "."


@pytest.mark.parametrize(
    "path",
    ["to_file", "to_dir/secret.txt", "src/inner_link/mod.py", "loop", "loop/x"],
)
def test_no_symbolic_link_is_followed_even_one_that_stays_inside(
    workspace: Workspace,
    path: str,
) -> None:
    with pytest.raises(InvalidArgument, match="symbolic link"):
        workspace.open(workspace.relative(path), os.O_RDONLY)


def test_a_hard_link_is_refused_unless_allowed(tree: Path) -> None:
    with pytest.raises(InvalidArgument, match="hard links"):
        Workspace(tree).open(WorkspaceFile(("hard",)), os.O_RDONLY)
    fd = Workspace(tree, allow_hardlinks=True).open(WorkspaceFile(("hard",)), os.O_RDONLY)
    os.close(fd)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "~/x",
        "../outside/secret.txt",
        "src/../../outside",
        "src/..",
        "a\\b",
        "a\x00b",
        "a\nb",
        "a\u202eb",
        "a\u200bb",
        "x" * (MAX_PATH_CHARS + 1),
        "a/" + "n" * 300,
        "",
    ],
)
def test_paths_are_refused_lexically_before_anything_is_opened(
    workspace: Workspace,
    path: str,
) -> None:
    with pytest.raises(InvalidArgument):
        workspace.relative(path)


@pytest.mark.parametrize("path", [None, 3, b"a", ["a"]])
def test_a_path_must_be_text(workspace: Workspace, path: object) -> None:
    with pytest.raises(InvalidArgument):
        workspace.relative(path)


def test_missing_files_and_kinds_are_told_apart(workspace: Workspace) -> None:
    with pytest.raises(NotFound):
        workspace.open(workspace.relative("nope.txt"), os.O_RDONLY)
    with pytest.raises(NotFound):
        workspace.open(workspace.relative("nope/x.txt"), os.O_RDONLY)
    with pytest.raises(InvalidArgument, match="not a directory"):
        workspace.open(workspace.relative("src/pkg/mod.py/x"), os.O_RDONLY)
    with pytest.raises(InvalidArgument, match="is a directory"):
        workspace.open(workspace.relative("src"), os.O_WRONLY)
    with pytest.raises(InvalidArgument, match="exists already"):
        workspace.open(
            workspace.relative("src/pkg/mod.py"),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL,
        )
    assert workspace.exists(workspace.relative("src/pkg"))
    assert not workspace.exists(workspace.relative("src/none"))
    assert workspace.stat(workspace.relative("src/pkg/mod.py")).st_size == len("print('hi')\n")


def test_files_are_created_beneath_the_root(workspace: Workspace, tree: Path) -> None:
    fd = workspace.open(workspace.relative("src/new.txt"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"ok")
    os.close(fd)
    assert (tree / "src" / "new.txt").read_bytes() == b"ok"
    dir_fd = workspace.open_dir(workspace.relative("src"))
    try:
        assert "new.txt" in os.listdir(dir_fd)  # noqa: PTH208 - a directory fd
    finally:
        os.close(dir_fd)


def test_a_directory_swapped_for_a_symlink_is_refused_on_the_next_open(
    workspace: Workspace,
    tree: Path,
) -> None:
    file = workspace.relative("src/pkg/mod.py")
    os.close(workspace.open(file, os.O_RDONLY))
    (tree / "src" / "pkg").rename(tree / "src" / "pkg_moved")
    (tree / "src" / "pkg").symlink_to(tree.parent / "outside")
    with pytest.raises(InvalidArgument):
        workspace.open(workspace.relative("src/pkg/secret.txt"), os.O_RDONLY)


@pytest.mark.parametrize("path", ["a/.git/config", ".git", ".GIT/hooks/pre-commit", "."])
def test_writes_into_protected_directories_or_the_root_are_refused(
    workspace: Workspace,
    path: str,
) -> None:
    with pytest.raises(InvalidArgument):
        workspace.check_writable(workspace.relative(path))
    workspace.check_writable(workspace.relative("src/gitignore.txt"))


def test_the_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Workspace(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError):
        Workspace(tmp_path / "file")


def test_a_root_given_through_a_symlink_is_resolved_once(tmp_path: Path, tree: Path) -> None:
    (tmp_path / "alias").symlink_to(tree)
    assert Workspace(tmp_path / "alias").root == tree.resolve()


def test_refusals_leak_no_file_descriptors(workspace: Workspace) -> None:
    before = len(list(Path("/proc/self/fd").iterdir()))
    for path in ["to_file", "hard", "nope", "src/pkg/mod.py/x", "to_dir/secret.txt"]:
        with pytest.raises((InvalidArgument, NotFound)):
            workspace.open(workspace.relative(path), os.O_RDONLY)
    assert len(list(Path("/proc/self/fd").iterdir())) == before


@given(st.text(max_size=60))
def test_no_text_reaches_outside_the_root(text: str) -> None:
    root = Path(__file__).parent
    workspace = Workspace(root)
    try:
        file = workspace.relative(text)
    except InvalidArgument:
        return
    assert ".." not in file.parts
    assert all(part and "/" not in part for part in file.parts)
    assert (root / file.text).resolve().is_relative_to(root) or file.text == "."


@pytest.mark.parametrize("path", ["to_file", "to_dir", "loop"])
def test_stat_and_exists_refuse_a_final_symbolic_link(workspace: Workspace, path: str) -> None:
    with pytest.raises(InvalidArgument, match="symbolic link"):
        workspace.stat(workspace.relative(path))
    with pytest.raises(InvalidArgument):
        workspace.exists(workspace.relative(path))


def test_one_root_descriptor_for_many_opens_refuses_what_a_fresh_one_refuses(
    workspace: Workspace,
    tree: Path,
) -> None:
    before = len(list(Path("/proc/self/fd").iterdir()))
    with workspace.root_fd() as root:
        assert workspace.stat(workspace.relative("src/pkg/mod.py"), root=root).st_size == 12
        for path in ["to_file", "to_dir", "to_dir/secret.txt", "loop", "hard", "nope"]:
            with pytest.raises((InvalidArgument, NotFound)):
                workspace.stat(workspace.relative(path), root=root)
        (tree / "src" / "pkg").rename(tree / "src" / "pkg_moved")
        (tree / "src" / "pkg").symlink_to(tree.parent / "outside")
        with pytest.raises(InvalidArgument):
            workspace.open(workspace.relative("src/pkg/secret.txt"), os.O_RDONLY, root=root)
    assert len(list(Path("/proc/self/fd").iterdir())) == before


# --- Beneath: many statuses, each directory opened once -----------------------------------

_STATUS_PATHS = [
    ("src", "pkg", "mod.py"),
    ("src", "pkg"),
    ("src",),
    (".git", "config"),
    ("to_file",),
    ("to_dir",),
    ("to_dir", "secret.txt"),
    ("src", "inner_link"),
    ("src", "inner_link", "mod.py"),
    ("loop",),
    ("loop", "x"),
    ("hard",),
    ("nope",),
    ("src", "nope", "x"),
    ("src", "pkg", "mod.py", "x"),
    (),
    ("..",),
    ("src", ".."),
    ("src", "pkg", "."),
    ("src", ""),
    ("src", "a/b"),
]


def _status(stat_of: Callable[[WorkspaceFile], os.stat_result], file: WorkspaceFile) -> object:
    """What a status call answers, comparably: the file's identity, or the refusal."""
    try:
        info = stat_of(file)
    except (InvalidArgument, NotFound) as exc:
        return type(exc).__name__, str(exc)
    return info.st_dev, info.st_ino, info.st_mode, info.st_nlink


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
@pytest.mark.parametrize("allow_hardlinks", [False, True], ids=["one_link", "hardlinks"])
def test_beneath_answers_and_refuses_as_workspace_stat(
    tree: Path, allow_hardlinks: bool, use_openat2: bool
) -> None:
    workspace = Workspace(tree, use_openat2=use_openat2, allow_hardlinks=allow_hardlinks)
    expected = [_status(workspace.stat, WorkspaceFile(parts)) for parts in _STATUS_PATHS]
    with Beneath(workspace) as beneath:
        # Twice: the second time every directory is one kept from the first.
        for _ in range(2):
            got = [_status(beneath.stat, WorkspaceFile(parts)) for parts in _STATUS_PATHS]
            assert got == expected
    assert isinstance(expected[0], tuple)
    assert stat.S_ISREG(expected[0][2])  # the list holds a file found
    refusals = dict(zip(_STATUS_PATHS, expected, strict=True))
    assert refusals[("to_dir", "secret.txt")][0] == "InvalidArgument"
    assert refusals[("nope",)][0] == "NotFound"
    assert (refusals[("hard",)][0] == "InvalidArgument") is not allow_hardlinks


def test_beneath_keeps_a_few_directories_open_and_closes_them(tree: Path) -> None:
    for n in range(20):
        (tree / f"d{n:02d}").mkdir()
        (tree / f"d{n:02d}" / "f.txt").write_text("x")
    workspace = Workspace(tree)

    def open_fds() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    before = open_fds()
    beneath = Beneath(workspace)
    for n in range(20):
        assert beneath.stat(WorkspaceFile((f"d{n:02d}", "f.txt"))).st_size == 1
        assert open_fds() <= before + 1 + 8  # the root and the last eight directories
    beneath.close()
    assert open_fds() == before
    # Usable again after a close, and closed again.
    assert beneath.stat(WorkspaceFile(("d00", "f.txt"))).st_size == 1
    beneath.close()
    assert open_fds() == before


def test_beneath_answers_for_a_kept_directory_as_it_was_opened(tree: Path) -> None:
    """A kept directory swapped for a link to outside: the next file is still looked up
    in the directory that was opened beneath the root, never through the link."""
    workspace = Workspace(tree)
    with Beneath(workspace) as beneath:
        assert beneath.stat(WorkspaceFile(("src", "pkg", "mod.py"))).st_size == 12
        (tree / "src" / "pkg").rename(tree / "src" / "pkg_moved")
        (tree / "src" / "pkg").symlink_to(tree.parent / "outside")
        with pytest.raises(NotFound):
            beneath.stat(WorkspaceFile(("src", "pkg", "secret.txt")))
    with Beneath(workspace) as fresh, pytest.raises(InvalidArgument, match="symbolic link"):
        fresh.stat(WorkspaceFile(("src", "pkg", "secret.txt")))


def test_a_root_gone_is_an_error_for_beneath_as_for_workspace_stat(tmp_path: Path) -> None:
    """Not a refusal of the file: the search fails loudly rather than show nothing."""
    root = tmp_path / "gone"
    root.mkdir()
    workspace = Workspace(root)
    root.rmdir()
    file = WorkspaceFile(("a", "b.txt"))
    with pytest.raises(FileNotFoundError):
        workspace.stat(file)
    with Beneath(workspace) as beneath, pytest.raises(FileNotFoundError):
        beneath.stat(file)
