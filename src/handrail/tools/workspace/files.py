"""Reading the workspace: `find_files` and `read_file`, both read-only and bounded.

Every file and directory is reached through the `Workspace` (beneath its root, never
through a symbolic link); listings and reads stop at configured limits and say so.
Owns the tools' configuration, their definitions and reading a file's lines; the
directory walk is `_finder`'s, globs are matched by `_globs` and text is decoded and
read line by line by `_text`. Nothing here writes, follows a link, compiles a model's
glob into a regex, or loads a whole large file into memory.
"""

# No `from __future__ import annotations`: the tools' parameter types close over the
# configured limits, so they must be evaluated where the tools are defined.
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import Field

from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, InvalidArgument, ToolFailed
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel
from handrail.tools.workspace._finder import FindQuery, WalkLimits, find
from handrail.tools.workspace._globs import MAX_GLOB_CHARS, Glob
from handrail.tools.workspace._text import (
    SAMPLE_BYTES,
    Encoding,
    LineLocator,
    LineReader,
    detect_encoding,
    explicit_encoding,
    read_window,
)
from handrail.tools.workspace.paths import MAX_PATH_CHARS, Workspace, WorkspaceFile

__all__ = ["Glob", "WorkspaceConfig", "read_tools"]

_MIB = 1024 * 1024
_TIME_RESERVE = 0.25
"""Seconds before the deadline at which a walk or a scan stops."""

# --- configuration -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkspaceConfig:
    """Limits and visibility rules of the workspace read tools.

    `root` must be the directory the `Workspace` is rooted at; what is ignored is the
    workspace's (`Workspace(ignore=...)`), the same for every workspace tool.
    `list_hidden` says whether names starting with "." are listed. Whole reads of
    files larger than `max_file_bytes` are refused; line ranges and tails of them are
    served.
    """

    root: Path
    max_results: int = 200
    max_read_lines: int = 400
    max_file_bytes: int = 2 * _MIB
    max_read_chars: int = 12_000
    """Characters of JSON text in one read_file result; the rest is left for a next call."""
    max_line_chars: int = 2_000
    """Longer lines are cut to this many characters (and listed in `cut_lines`)."""
    max_visited: int = 50_000
    """Directory entries one find_files call may look at before it stops."""
    max_depth: int = 64
    list_hidden: bool = True
    timeout: float = 10.0

    def __post_init__(self) -> None:
        limits = (
            self.max_results,
            self.max_read_lines,
            self.max_file_bytes,
            self.max_read_chars,
            self.max_line_chars,
            self.max_visited,
            self.max_depth,
        )
        if min(limits) < 1 or self.timeout <= 0:
            raise ConfigurationError("workspace limits and the timeout must be positive")


# --- shared helpers ------------------------------------------------------------------------


def _parse_moment(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            "modified_after must be an ISO 8601 date or date-time, such as 2024-05-01T12:00:00Z."
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _out_of_time(ctx: ToolContext) -> bool:
    return ctx.remaining() < _TIME_RESERVE


def _size_text(size: int) -> str:
    return f"{size / _MIB:.1f} MiB" if size >= _MIB else f"{size} bytes"


def _time_check(ctx: ToolContext) -> Callable[[], None]:
    """A check that refuses to read on when the call's deadline is near."""

    def check() -> None:
        if _out_of_time(ctx):
            raise ToolFailed(
                "The file is too large to read that far in time; use search_text to find "
                "the line, then read a short range around it."
            )

    return check


# --- read_file -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _ReadRequest:
    path: str
    start_line: int | None
    max_lines: int | None
    tail: int | None
    encoding: str


def _regular_file(fd: int, file: WorkspaceFile) -> os.stat_result:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise InvalidArgument(f"{file.text} is a directory; list it with find_files.")
    if not stat.S_ISREG(info.st_mode):
        raise InvalidArgument(f"{file.text} is not a regular file; it is not read.")
    return info


def _read(
    workspace: Workspace,
    config: WorkspaceConfig,
    request: _ReadRequest,
    ctx: ToolContext,
    namespace: str,
) -> dict[str, Any]:
    if request.tail is not None and (request.start_line is not None or request.max_lines):
        raise InvalidArgument("Give either tail or start_line/max_lines, not both.")
    file = workspace.relative(request.path)
    if workspace.ignored(file):
        raise InvalidArgument(f"{file.text} is ignored in this workspace and cannot be read.")
    # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
    fd = workspace.open(file, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = _regular_file(fd, file)
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "rb", buffering=0, closefd=True) as raw:  # noqa: PTH123 - an fd, not a path
        size = info.st_size
        if size > config.max_file_bytes and request.start_line is None and request.tail is None:
            raise InvalidArgument(
                f"{file.text} is {_size_text(size)}, over the {_size_text(config.max_file_bytes)} "
                f"limit for reading a whole file. Use {namespace}.search_text to find what you "
                f"need, then read_file with start_line (and max_lines) around it, or tail=N for "
                f"the last N lines."
            )
        sample = os.pread(fd, SAMPLE_BYTES, 0)
        if request.encoding == "auto":
            encoding = detect_encoding(sample, whole=len(sample) >= size)
            if isinstance(encoding, str):
                raise InvalidArgument(
                    f"{file.text} looks like a binary file ({encoding}); read_file reads text "
                    f"only. Pass encoding= if it really is text."
                )
        else:
            encoding = explicit_encoding(request.encoding, sample)
        check = _time_check(ctx)
        units = LineLocator(fd, size, encoding, check)
        return _lines(
            raw, units, check, file=file, encoding=encoding, config=config, request=request
        )


def _lines(
    raw: BinaryIO,
    units: LineLocator,
    check: Callable[[], None],
    *,
    file: WorkspaceFile,
    encoding: Encoding,
    config: WorkspaceConfig,
    request: _ReadRequest,
) -> dict[str, Any]:
    size = os.fstat(raw.fileno()).st_size
    countable = size <= config.max_file_bytes
    first: int | None
    if request.tail is not None:
        offset, at_start = units.tail_start(request.tail)
        first = 1 if at_start else None
        if first is None and countable:
            first = units.count(encoding.origin, offset) + 1
        count = request.tail
    else:
        first = request.start_line or 1
        found = units.line_start(first)
        if found is None:
            raise InvalidArgument(
                f"start_line {first} is past the end of {file.text}, which has "
                f"{units.lines()} lines."
            )
        offset = found
        count = request.max_lines or config.max_read_lines
    keep_end = request.tail is not None
    window = read_window(
        LineReader(raw, encoding, offset, check),
        encoding,
        max_line_chars=config.max_line_chars,
        max_chars=config.max_read_chars,
        count=count,
        keep_end=keep_end,
    )
    if first is not None:
        first += window.dropped
    notes: list[str] = []
    total: int | None
    if not window.more and first is not None:
        total = first + len(window.lines) - 1
    elif countable:
        total = units.lines()
    else:
        total = None
        notes.append("The total line count is unknown: the file is too large to count cheaply.")
    if first is None:
        notes.append("Line numbers are unknown: the file was read from its end, not its start.")
    if encoding.guessed:
        notes.append(
            f"The encoding {encoding.codec} was guessed; pass encoding= if text looks wrong."
        )
    if window.dropped:
        notes.append(f"The reply is full: only the last {len(window.lines)} lines fit.")
    result: dict[str, Any] = {
        "path": file.text,
        "encoding": encoding.shown,
        "size": size,
        "first_line": first,
        "lines": window.lines,
        "total_lines": total,
        "truncated": window.more or (keep_end and first != 1),
    }
    if window.more and first is not None:
        result["next_start_line"] = first + len(window.lines)
        if window.full:
            notes.append("The reply is full; continue with next_start_line.")
    if not window.more:
        result["ends_with_newline"] = bool(window.last_newline)
    if any(window.cut):
        notes.append(f"Lines longer than {config.max_line_chars} characters were cut.")
        if first is not None:
            result["cut_lines"] = [first + i for i, cut in enumerate(window.cut) if cut]
    if notes:
        result["note"] = " ".join(notes)
    return result


# --- the tools -----------------------------------------------------------------------------


def read_tools(
    workspace: Workspace,
    config: WorkspaceConfig,
    *,
    namespace: str = "workspace",
) -> list[Tool]:
    """`find_files` and `read_file` over `workspace`, limited by `config`.

    Both are L1 reads with no side effect; their results are untrusted data.
    """
    if Path(config.root).resolve() != workspace.root:
        raise ConfigurationError("the workspace config and the Workspace name different roots")
    results = ResultPolicy(trust=Trust.UNTRUSTED)
    walk = WalkLimits(
        max_visited=config.max_visited,
        max_depth=config.max_depth,
        list_hidden=config.list_hidden,
    )
    limit = config.max_results
    lines = config.max_read_lines

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace=namespace,
        timeout=config.timeout,
        results=results,
    )
    def find_files(
        ctx: ToolContext,
        *,
        glob: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_GLOB_CHARS,
                description=(
                    "Relative path glob: '*' within a name, '**' for any directories, '?', "
                    "[abc]. Without '/' it matches names at any depth; './x' anchors at the root."
                ),
            ),
        ] = "**/*",
        type: Literal["file", "dir", "symlink", "any"] = "file",  # noqa: A002 - the model's word
        min_size: Annotated[
            int | None, Field(ge=0, description="Files of at least this many bytes")
        ] = None,
        max_size: Annotated[
            int | None, Field(ge=0, description="Files of at most this many bytes")
        ] = None,
        modified_after: Annotated[
            str | None,
            Field(max_length=40, description="ISO 8601 date-time; UTC when no offset is given"),
        ] = None,
        max_results: Annotated[int, Field(ge=1, le=limit)] = limit,
    ) -> dict[str, Any]:
        """List files and directories in the workspace whose relative path matches a glob.

        Results are in path order with size (files) and modification time, a total count
        and a truncated flag. Symbolic links are never followed: they are listed (type
        'symlink') and not entered. Ignored directories such as .git are skipped.
        """
        if min_size is not None and max_size is not None and min_size > max_size:
            raise InvalidArgument("min_size is larger than max_size.")
        query = FindQuery(
            glob=Glob.compile(glob),
            kind=type,
            min_size=min_size,
            max_size=max_size,
            modified_after=None if modified_after is None else _parse_moment(modified_after),
            limit=max_results,
        )
        return find(workspace, walk, query, lambda: _out_of_time(ctx))

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace=namespace,
        timeout=config.timeout,
        results=results,
    )
    def read_file(
        ctx: ToolContext,
        *,
        path: Annotated[
            str,
            Field(min_length=1, max_length=MAX_PATH_CHARS, description="Relative to the root"),
        ],
        start_line: Annotated[
            int | None, Field(ge=1, description="First line to read (from 1)")
        ] = None,
        max_lines: Annotated[int | None, Field(ge=1, le=lines)] = None,
        tail: Annotated[
            int | None, Field(ge=1, le=lines, description="Read the last N lines instead")
        ] = None,
        encoding: Annotated[
            str,
            Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$", description="'auto' or a codec"),
        ] = "auto",
    ) -> dict[str, Any]:
        """Read lines of a text file in the workspace, with line numbers.

        `first_line` numbers the first returned line. Binary files are refused; files
        too large to read whole must be read by start_line ranges or tail, after
        search_text. Continue a cut read with `next_start_line`.
        """
        request = _ReadRequest(
            path=path,
            start_line=start_line,
            max_lines=max_lines,
            tail=tail,
            encoding=encoding,
        )
        return _read(workspace, config, request, ctx, namespace)

    return [find_files, read_file]
