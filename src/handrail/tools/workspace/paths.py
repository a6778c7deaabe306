"""Safe paths: every file a workspace tool touches is opened beneath its root.

A check followed by an open is a race (a directory can become a symlink in between),
so nothing here checks a path and then opens it. Paths are opened relative to a file
descriptor of the root: with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the
kernel has it, else component by component with `O_NOFOLLOW`, each directory opened
relative to the one before. Either way no symbolic link is followed anywhere in the
path and `..` cannot climb out. Model-given paths are also checked lexically first
(relative, no `..`, no NUL or control characters), so refusals are clear. Many files'
statuses in a row (`Beneath`, for a search's page) open each directory that way once and
then look the file up in it by its name alone.

The workspace also holds the one ignore policy of every workspace tool: names (such as
`.git`) that no tool lists, reads, searches or writes, at any depth.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from handrail.errors import ConfigurationError, InvalidArgument, NotFound
from handrail.tools.workspace._globs import Glob

__all__ = ["MAX_PATH_CHARS", "Beneath", "Workspace", "WorkspaceFile"]

MAX_PATH_CHARS = 4096
_MAX_NAME_BYTES = 255
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_PROTECTED = frozenset({".git"})
_IGNORED = (".git",)
_IGNORES_CACHED = 4096
_DIRECTORIES_KEPT = 8
# Last parts `Beneath` leaves to `Workspace.stat`: they name no file inside a directory.
_NOT_NAMES = frozenset({"", ".", ".."})


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


@dataclass(frozen=True, slots=True)
class WorkspaceFile:
    """A path checked lexically: its parts, for display and for opening."""

    parts: tuple[str, ...]

    @property
    def text(self) -> str:
        """The path as the model and people see it, relative to the root."""
        return "/".join(self.parts) or "."

    @property
    def name(self) -> str:
        """The last part ("" for the root itself)."""
        return self.parts[-1] if self.parts else ""

    @property
    def parent(self) -> WorkspaceFile:
        """The directory holding it."""
        return WorkspaceFile(self.parts[:-1])


class Workspace:
    """A directory tree tools may read and (where allowed) write, and nothing else.

    `root` is trusted configuration and is resolved once. `ignore` holds name patterns
    (glob syntax, one path part each, matched case-insensitively) that every workspace
    tool treats as absent, at any depth: find_files does not list or enter them,
    read_file and search_text refuse them and never search them, the edit tools refuse
    to write them. Writes are also refused inside `protected` directories (`.git` by
    default) at any depth. Files with more than one hard link are refused unless
    `allow_hardlinks`: a hard link to a file outside the root looks like any file inside
    it.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        ignore: Iterable[str] = _IGNORED,
        protected: Iterable[str] = _PROTECTED,
        allow_hardlinks: bool = False,
        use_openat2: bool | None = None,
    ) -> None:
        resolved = Path(root).resolve(strict=True)
        if not resolved.is_dir():
            raise ConfigurationError(f"workspace root {resolved} is not a directory")
        self._root = resolved
        self._ignore_patterns = tuple(ignore)
        self._ignore = _ignore_globs(self._ignore_patterns)
        self._ignores_name: dict[str, bool] = {}
        self._protected = frozenset(name.casefold() for name in protected)
        self._allow_hardlinks = allow_hardlinks
        self._openat2 = _openat2_works(resolved) if use_openat2 is None else use_openat2

    @property
    def root(self) -> Path:
        """The resolved root directory."""
        return self._root

    @property
    def ignore(self) -> tuple[str, ...]:
        """The ignore patterns: names every workspace tool treats as absent."""
        return self._ignore_patterns

    def ignores(self, name: str) -> bool:
        """Whether a file or directory of this name is hidden from every workspace tool.

        Answers are remembered by name (a bounded cache): a search asks it of every
        directory on the way to each file it shows.
        """
        known = self._ignores_name.get(name)
        if known is None:
            known = any(glob.matches((name,)) for glob in self._ignore)
            if len(self._ignores_name) >= _IGNORES_CACHED:
                self._ignores_name.clear()
            self._ignores_name[name] = known
        return known

    def ignored(self, file: WorkspaceFile) -> bool:
        """Whether any part of `file`'s path is an ignored name."""
        return any(self.ignores(part) for part in file.parts)

    @property
    def uses_openat2(self) -> bool:
        """Whether paths are resolved by the kernel (`openat2`) or component by component."""
        return self._openat2

    def relative(self, path: object) -> WorkspaceFile:
        """`path` checked lexically: relative, inside, and printable.

        Raises InvalidArgument for anything else: not text, empty, too long, absolute,
        containing `..`, a backslash, NUL, control or invisible format characters, or a
        name longer than the filesystem allows. "." and "" parts are dropped.
        """
        if not isinstance(path, str):
            raise InvalidArgument("A path must be text.")
        if not path or len(path) > MAX_PATH_CHARS:
            raise InvalidArgument(f"A path must be 1-{MAX_PATH_CHARS} characters.")
        if path.startswith(("/", "~")):
            raise InvalidArgument("Use a path relative to the workspace root, not an absolute one.")
        if "\\" in path:
            raise InvalidArgument("Use '/' to separate path parts; '\\' is not allowed.")
        if any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in path):
            raise InvalidArgument("A path must not contain control or invisible characters.")
        parts = tuple(part for part in path.split("/") if part not in {"", "."})
        if ".." in parts:
            raise InvalidArgument("A path must not contain '..'; stay inside the workspace.")
        for part in parts:
            if len(part.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES:
                raise InvalidArgument("A path part is longer than the filesystem allows.")
        return WorkspaceFile(parts)

    def check_writable(self, file: WorkspaceFile) -> None:
        """Refuse a write to the root, into a protected directory (`.git`) or an ignored name."""
        if not file.parts:
            raise InvalidArgument("The workspace root itself cannot be written.")
        if any(part.casefold() in self._protected for part in file.parts):
            raise InvalidArgument(
                f"Writing inside {'/'.join(sorted(self._protected))} is not allowed."
            )
        if self.ignored(file):
            raise InvalidArgument(
                f"{file.text} is ignored in this workspace and cannot be written.",
            )

    @contextmanager
    def root_fd(self) -> Iterator[int]:
        """A file descriptor of the root directory, closed afterwards."""
        fd = self._open_root()
        try:
            yield fd
        finally:
            os.close(fd)

    def open(
        self,
        file: WorkspaceFile,
        flags: int,
        mode: int = 0o644,
        *,
        root: int | None = None,
    ) -> int:
        """Open `file` beneath the root without following any symbolic link; a new fd.

        `root` is a descriptor from `root_fd`, for a caller opening many files in a row
        (else the root is opened for this call). Raises NotFound when it (or a directory
        on the way) does not exist, and InvalidArgument when the path goes through a
        symbolic link, leaves the root, names a directory where a file is needed (or the
        reverse), or names a file with several hard links.
        """
        flags |= os.O_CLOEXEC | os.O_NOFOLLOW
        with self.root_fd() if root is None else nullcontext(root) as at:
            try:
                fd = self._open_beneath(at, file, flags, mode)
            except OSError as exc:
                raise _refusal(exc, file) from None
        try:
            self._check_links(fd, file)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_dir(self, file: WorkspaceFile) -> int:
        """Open a directory beneath the root (for listing or as `dir_fd`); a new fd."""
        return self.open(file, os.O_RDONLY | os.O_DIRECTORY)

    def stat(self, file: WorkspaceFile, *, root: int | None = None) -> os.stat_result:
        """The status of `file` itself (a symbolic link is refused, never followed).

        `root` is as for `open`.
        """
        fd = self.open(file, os.O_PATH, root=root)
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        # O_PATH with O_NOFOLLOW opens a final symbolic link itself instead of refusing.
        if stat.S_ISLNK(info.st_mode):
            raise InvalidArgument(f"{file.text} is a symbolic link; it is not followed.")
        return info

    def exists(self, file: WorkspaceFile) -> bool:
        """Whether `file` exists beneath the root (reached without symbolic links)."""
        try:
            self.stat(file)
        except NotFound:
            return False
        return True

    def _open_root(self) -> int:
        return os.open(self._root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_beneath(self, root: int, file: WorkspaceFile, flags: int, mode: int) -> int:
        path = "/".join(file.parts) or "."
        if self._openat2:
            return _openat2(root, path, flags, mode)
        # Component by component: each directory opened relative to the one before,
        # none of them through a symbolic link.
        current = os.dup(root)
        try:
            for part in file.parts[:-1]:
                try:
                    nxt = os.open(
                        part,
                        os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=current,
                    )
                except NotADirectoryError:
                    # O_NOFOLLOW on a link to a directory says "not a directory".
                    if stat.S_ISLNK(os.stat(part, dir_fd=current, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                    raise
                os.close(current)
                current = nxt
            last = file.parts[-1] if file.parts else "."
            return os.open(last, flags, mode, dir_fd=current)
        finally:
            os.close(current)

    def _check_links(self, fd: int, file: WorkspaceFile) -> None:
        if not self._allow_hardlinks:
            self._check_status(os.fstat(fd), file)

    def _check_status(self, info: os.stat_result, file: WorkspaceFile) -> None:
        """Refuse a regular file with several hard links (unless they are allowed)."""
        if not self._allow_hardlinks and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise InvalidArgument(
                f"{file.text} has several hard links; such files are not opened here.",
            )


class Beneath:
    """The status of many files beneath a workspace's root, checked one after another.

    For a caller that checks files in path order (a search's page): the root is opened
    once, and each file's directory once while the files after it share it (the last
    few are kept open), as `Workspace.open` opens a directory: by `openat2`, no symbolic
    link on the way, not out of the root. The file itself is then one `fstatat` of its
    name in that directory, not following a link. The answers and refusals are those of
    `Workspace.stat`, at one system call per file instead of four; a workspace without
    `openat2`, and a last part that names no file in a directory, take `Workspace.stat`
    itself. A directory kept open is the one that was beneath the root when it was
    opened: renamed or swapped for a link since, it is still the one looked in, never
    the link (a search's page is checked as of its search, a millisecond). Close it (or
    use it as a context manager) to close what it opened.
    """

    __slots__ = ("_directories", "_root", "_workspace")

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._root: int | None = None
        self._directories: dict[tuple[str, ...], int] = {}

    def root_fd(self) -> int:
        """The descriptor of the root, opened on first use, as `Workspace.root_fd` opens it."""
        if self._root is None:
            self._root = self._workspace._open_root()  # noqa: SLF001 - the workspace's own
        return self._root

    def stat(self, file: WorkspaceFile) -> os.stat_result:
        """`Workspace.stat(file)`: NotFound, or InvalidArgument for a symbolic link."""
        workspace = self._workspace
        name = file.name
        root = self.root_fd()  # as `Workspace.stat`: a root that cannot be opened is OSError
        if name in _NOT_NAMES or "/" in name or "\x00" in name or not workspace.uses_openat2:
            return workspace.stat(file, root=root)
        try:
            info = os.stat(
                name, dir_fd=self._directory(root, file.parts[:-1]), follow_symlinks=False
            )
        except OSError as exc:
            raise _refusal(exc, file) from None
        if stat.S_ISLNK(info.st_mode):
            raise InvalidArgument(f"{file.text} is a symbolic link; it is not followed.")
        workspace._check_status(info, file)  # noqa: SLF001 - the workspace's own policy
        return info

    def _directory(self, root: int, parts: tuple[str, ...]) -> int:
        """A descriptor of the directory `parts` beneath `root` (OSError as openat2 says)."""
        if not parts:
            return root
        kept = self._directories
        fd = kept.get(parts)
        if fd is None:
            # No O_NOFOLLOW: with it (and O_PATH) openat2 opens a final link itself, and
            # O_DIRECTORY then says "not a directory"; without it, a link is ELOOP,
            # as for any other part of the file's path.
            flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
            fd = _openat2(root, "/".join(parts), flags, 0)
            if len(kept) >= _DIRECTORIES_KEPT:
                os.close(kept.pop(next(iter(kept))))
            kept[parts] = fd
        return fd

    def close(self) -> None:
        """Close the root and the directories opened so far; it may be used again."""
        opened = [*self._directories.values(), *([] if self._root is None else [self._root])]
        self._directories.clear()
        self._root = None
        for fd in opened:
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _ignore_globs(patterns: tuple[str, ...]) -> tuple[Glob, ...]:
    if any(not isinstance(p, str) or "/" in p or p in {"", ".", "**"} for p in patterns):
        raise ConfigurationError("workspace ignore patterns name one path part each")
    try:
        return tuple(Glob.compile(f"./{pattern}", casefold=True) for pattern in patterns)
    except InvalidArgument as exc:
        raise ConfigurationError(f"workspace ignore pattern: {exc.message}") from None


_REASONS = {
    errno.ELOOP: "goes through a symbolic link or out of the workspace; it is not opened",
    errno.EXDEV: "goes through a symbolic link or out of the workspace; it is not opened",
    errno.ENOTDIR: "has a part that is not a directory",
    errno.EISDIR: "is a directory",
    errno.EEXIST: "exists already",
    errno.EACCES: "cannot be opened: permission denied",
    errno.EPERM: "cannot be opened: permission denied",
}


def _refusal(exc: OSError, file: WorkspaceFile) -> Exception:
    if exc.errno == errno.ENOENT:
        return NotFound(f"{file.text} does not exist in the workspace.")
    reason = _REASONS.get(exc.errno or 0, "cannot be opened")
    return InvalidArgument(f"{file.text} {reason}.")


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(
        flags=flags,
        mode=mode if flags & os.O_CREAT else 0,
        resolve=_RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
    )
    fd = _libc().syscall(
        _SYS_OPENAT2,
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _openat2_works(root: Path) -> bool:
    """Whether this kernel resolves paths with openat2 (Linux 5.6 and newer)."""
    try:
        fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # pragma: no cover - the root was just resolved
        return False
    try:
        os.close(_openat2(fd, ".", os.O_PATH | os.O_CLOEXEC, 0))
    except (OSError, AttributeError):
        return False
    else:
        return True
    finally:
        os.close(fd)
