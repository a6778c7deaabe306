"""One skill folder read from disk: its file listing and SKILL.md, never following a link.

Owns the walk (directory by directory, each opened relative to its parent with
`O_NOFOLLOW`, so a symbolic link anywhere is seen and refused, never followed) and the
bounded read of SKILL.md (refused from its size before reading, then read with a cap).
Files with several hard links and special files are refused too: nothing outside the
folder is ever read. It never interprets SKILL.md (`_front_matter` and `_checks` do).
"""

from __future__ import annotations

import os
import stat
import unicodedata
from dataclasses import dataclass

from handrail.errors import InvalidArgument, NotFound
from handrail.skills._limits import SkillLimits
from handrail.skills._problems import SkillProblem
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

__all__ = ["SKILL_MD", "Folder", "open_folder", "read_bounded"]

SKILL_MD = "SKILL.md"
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 64 * 1024
_SURROGATES = (0xDC80, 0xDCFF)
"""What `surrogateescape` turns bytes that are not UTF-8 into, in file names."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Folder:
    """What a skill folder holds: its regular files (relative paths), SKILL.md's text."""

    files: tuple[str, ...]
    skill_md: str | None
    """None when it could not be read (the problems say why)."""
    problems: tuple[SkillProblem, ...]


def open_folder(library: Workspace, name: str, limits: SkillLimits) -> Folder:
    """The listing of the skill folder `name` of `library` and its SKILL.md, with problems.

    The folder is opened beneath the library's root like every file in it: no symbolic
    link is followed on the way, so a folder swapped for a link is refused, not read.
    """
    problems: list[SkillProblem] = []
    files: list[str] = []
    try:
        fd = library.open_dir(WorkspaceFile((name,)))
    except (InvalidArgument, NotFound) as exc:
        problems.append(SkillProblem(file=name, line=None, message=_unquoted(exc.message, name)))
        return Folder(files=(), skill_md=None, problems=tuple(problems))
    try:
        _Walker(name, limits, files, problems).walk(fd, ())
    finally:
        os.close(fd)
    text: str | None = None
    if SKILL_MD in files:
        text = _read_skill_md(library, name, limits, problems)
    elif not any(p.file == f"{name}/{SKILL_MD}" for p in problems):
        problems.append(SkillProblem(file=name, line=None, message="has no SKILL.md"))
    return Folder(files=tuple(sorted(files)), skill_md=text, problems=tuple(problems))


def read_bounded(workspace: Workspace, file: WorkspaceFile, max_bytes: int) -> bytes:
    """The bytes of `file` beneath `workspace`, refused (InvalidArgument) when larger.

    The size is checked on the open descriptor before reading, and reading stops one
    byte past the bound in case the file grows meanwhile. A symbolic link anywhere in
    the path, `..`, or a file with several hard links is refused by the workspace.
    """
    fd = workspace.open(file, os.O_RDONLY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"{file.text} is not a regular file.")
        if info.st_size > max_bytes:
            raise InvalidArgument(f"{file.text} is larger than {max_bytes} bytes.")
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes and (chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_bytes:
        raise InvalidArgument(f"{file.text} is larger than {max_bytes} bytes.")
    return b"".join(chunks)


def _read_skill_md(
    library: Workspace,
    name: str,
    limits: SkillLimits,
    problems: list[SkillProblem],
) -> str | None:
    where = f"{name}/{SKILL_MD}"
    try:
        data = read_bounded(library, WorkspaceFile((name, SKILL_MD)), limits.max_skill_md_bytes)
    except (InvalidArgument, NotFound) as exc:
        problems.append(SkillProblem(file=where, line=None, message=_unquoted(exc.message, where)))
        return None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problems.append(SkillProblem(file=where, line=line, message="is not UTF-8 text"))
        return None


@dataclass(slots=True)
class _Walker:
    """The state of one folder's walk: what it found so far."""

    label: str
    limits: SkillLimits
    files: list[str]
    problems: list[SkillProblem]

    def walk(self, fd: int, parts: tuple[str, ...]) -> None:
        """Add the regular files below the directory `fd` to `files`, problems to `problems`."""
        with os.scandir(fd) as entries:
            found = sorted(entries, key=lambda entry: entry.name)
        for entry in found:
            path = (*parts, entry.name)
            if len(self.files) >= self.limits.max_files:
                self._problem((), f"holds more than {self.limits.max_files} files")
                return
            name_problem = _name_problem(entry.name)
            if name_problem is not None:
                self._problem(path, name_problem)
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                self._problem(path, "is a symbolic link; links are refused anywhere in a skill")
            elif stat.S_ISDIR(info.st_mode):
                if len(path) > self.limits.max_depth:
                    self._problem(path, f"is nested deeper than {self.limits.max_depth} levels")
                else:
                    self._walk_into(fd, path)
            elif not stat.S_ISREG(info.st_mode):
                self._problem(path, "is not a regular file or directory")
            elif info.st_nlink > 1:
                self._problem(path, "has several hard links (another may be outside the folder)")
            else:
                self.files.append("/".join(path))

    def _walk_into(self, parent: int, path: tuple[str, ...]) -> None:
        try:
            fd = os.open(path[-1], _DIRECTORY_FLAGS, dir_fd=parent)
        except OSError as exc:  # replaced by a link or removed since it was listed
            self._problem(path, f"cannot be opened: {exc.strerror}")
            return
        try:
            self.walk(fd, path)
        finally:
            os.close(fd)

    def _problem(self, path: tuple[str, ...], message: str) -> None:
        where = "/".join((self.label, *path))
        self.problems.append(SkillProblem(file=where, line=None, message=message))


def _name_problem(name: str) -> str | None:
    if any(_SURROGATES[0] <= ord(ch) <= _SURROGATES[1] for ch in name):
        return "has a name that is not UTF-8"
    if any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in name) or "\\" in name:
        return "has a name with control, invisible or backslash characters"
    return None


def _unquoted(message: str, where: str) -> str:
    """A workspace refusal ("x/SKILL.md is ...") as a problem of that file ("is ...")."""
    return message.removeprefix(f"{where} ").rstrip(".")
