"""Text search beneath a workspace root: `search_text`, run by ripgrep.

Owns the tool and its limits, the argument vector (built by code: the pattern only as
the value of `--regexp=`, paths only after `--`, never a flag the model chose) and the
ripgrep process (confined by bubblewrap where only the workspace exists, read-only; a
clean environment, no config file, no symbolic links followed, its process group killed
on timeout). Its JSON output is read by `_rg_json` and paged by `_search_pages`. It
never writes, and never reports a file reached through a symbolic link or with several
hard links.
"""

# No `from __future__ import annotations`: the tool's parameter annotations name the
# configured limits, and get_type_hints must resolve them from the builder's closure.

import asyncio
import contextlib
import os
import re
import shutil
import signal
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, InvalidArgument, NotFound, ToolFailed
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel, SideEffect
from handrail.tools._sandbox_confine import Confinement
from handrail.tools.workspace._rg_json import (
    Line,
    Lines,
    Long,
    elapsed_ms,
    json_string_prefix,
    line_text,
    long_message,
    message,
    path_parts,
)
from handrail.tools.workspace._search_pages import (
    Collect,
    ContextLine,
    Page,
    Stream,
    TextMatch,
    sort_key,
)
from handrail.tools.workspace.paths import MAX_PATH_CHARS, Workspace, WorkspaceFile

__all__ = [
    "ContextLine",
    "SearchConfig",
    "SearchResult",
    "TextMatch",
    "TextSearch",
    "search_tools",
]

Case = Literal["smart", "sensitive", "insensitive"]
_CASE_FLAGS: Mapping[str, str] = {
    "smart": "--smart-case",
    "sensitive": "--case-sensitive",
    "insensitive": "--ignore-case",
}

_MAX_PATHS = 16
_MAX_GLOBS = 8
_MAX_GLOB_CHARS = 100

_READ_CHUNK = 1 << 18
_STDERR_KEEP = 4096
_DRAIN_SECONDS = 5.0
_DEADLINE_MARGIN = 0.1
_TOOL_TIMEOUT_MARGIN = 2.0
_GLOB_TYPE_INCLUDE = "handrailinclude"
_GLOB_TYPE_EXCLUDE = "handrailexclude"
_FORBIDDEN_GLOB = re.compile(r"[/\\:\x00-\x1f\x7f]")
_ERROR_LINE = re.compile(r"^error: (.+)$", re.MULTILINE)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")

# The private names these lived under before `_rg_json` and `_search_pages` were split
# out; tests still reach for them here.
_Collect = Collect
_Lines = Lines
_Long = Long
_Page = Page
_Stream = Stream
_elapsed_ms = elapsed_ms
_json_string_prefix = json_string_prefix
_long_message = long_message
_message = message
_path_parts = path_parts
_text_of = line_text


# --- configuration and results ---------------------------------------------------------


def _which_rg() -> str | None:
    return shutil.which("rg")


def _which_bwrap() -> str | None:
    return shutil.which("bwrap")


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchConfig:
    """Limits of `search_text`.

    `rg` is the ripgrep binary (an absolute path; by default the one on PATH when the
    config is made). `timeout` bounds one search in seconds, after which ripgrep's
    process group is killed and what was found so far is returned. `count_limit` is
    how many matching lines are counted before the total is reported as a lower bound.
    `regex_size_limit` and `dfa_size_limit` bound the compiled regex and its lazy DFA
    in bytes, so even a huge pattern compiles quickly or is refused. A page stops
    early once its JSON reaches about `max_result_chars`, so that it fits the gate's
    result budget whole and `next_skip` counts exactly what the model was shown.

    With `confine` (the default) ripgrep runs under bubblewrap (`bwrap`, by default the
    one on PATH) in a mount namespace that holds the workspace, read-only, and
    ripgrep's own files (its binary and libraries, which every user may read), and no
    capability: a directory or file of the workspace swapped for a symbolic link while
    ripgrep runs leads nowhere, because the outside does not exist there. A workspace
    file only another user may read is then not searched. `confine=False` runs ripgrep
    on the host and accepts a race: ripgrep opens checked paths by name, so a concurrent
    writer in the workspace can make it read files outside it.
    """

    rg: str | None = field(default_factory=_which_rg)
    bwrap: str | None = field(default_factory=_which_bwrap)
    confine: bool = True
    timeout: float = 10.0
    max_matches: int = 200
    max_line_chars: int = 300
    max_context: int = 5
    max_pattern_chars: int = 1000
    count_limit: int = 2000
    max_skip: int = 100_000
    regex_size_limit: int = 4 << 20
    dfa_size_limit: int = 16 << 20
    max_result_chars: int = 12_000

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigurationError("a search timeout must be positive")
        for name in (
            "max_matches",
            "max_line_chars",
            "max_pattern_chars",
            "count_limit",
            "regex_size_limit",
            "dfa_size_limit",
            "max_result_chars",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"a search config's {name} must be positive")
        if self.max_context < 0 or self.max_skip < 0:
            raise ConfigurationError("a search config's max_context and max_skip must be >= 0")
        if self.count_limit < self.max_matches:
            raise ConfigurationError("a search config's count_limit must be >= max_matches")


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    """A page of matches, in path order, and what is known about the rest.

    `total_matches` counts matching lines and `files_with_matches` files; both are exact
    when `complete` and lower bounds otherwise. When `truncated`, more matches follow:
    call again with the same arguments and `skip=next_skip`. `refused_files` counts
    files with matches left out because they are reached through a symbolic link or
    have several hard links; files are checked up to the end of the page, so one
    further on is left out (and its matches uncounted) only when a page reaches it.
    `elapsed_ms` is ripgrep's own time when it finished.
    """

    matches: tuple[TextMatch, ...]
    total_matches: int
    files_with_matches: int
    complete: bool
    truncated: bool
    next_skip: int | None
    timed_out: bool = False
    refused_files: int = 0
    elapsed_ms: float | None = None


# --- running ripgrep ---------------------------------------------------------------------


class _Ended(Enum):
    FINISHED = "finished"
    """ripgrep closed its output."""
    STOPPED = "stopped"
    """The sink had enough; ripgrep was killed."""
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class _Run:
    ended: _Ended
    stderr: bytes


async def _pump(stream: asyncio.StreamReader, take: Callable[[Line], bool]) -> _Ended:
    lines = Lines()
    while chunk := await stream.read(_READ_CHUNK):
        for line in lines.feed(chunk):
            if take(line):
                return _Ended.STOPPED
    last = lines.close()
    return _Ended.STOPPED if any(take(line) for line in last) else _Ended.FINISHED


async def _head(stream: asyncio.StreamReader, keep: int) -> bytes:
    """Read `stream` to its end (so the writer never blocks) and keep its first bytes."""
    kept = bytearray()
    while chunk := await stream.read(_READ_CHUNK):
        kept += chunk[: max(0, keep - len(kept))]
    return bytes(kept)


async def _run(
    argv: Sequence[str],
    *,
    cwd: os.PathLike[str] | str,
    take: Callable[[Line], bool],
    deadline: float,
) -> _Run:
    """Run ripgrep, feed its output lines to `take` until it says stop; always reaped."""
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env={},
            start_new_session=True,
            limit=_READ_CHUNK,
        ),
    )
    try:
        # Shielded: a cancel while the process starts must not leave its group running
        # (asyncio would kill only the direct child).
        process = await asyncio.shield(starting)
    except asyncio.CancelledError:
        await _abandon(starting)
        raise
    except OSError:
        raise ToolFailed("The search program could not be started.") from None
    stdout, stderr = process.stdout, process.stderr
    if stdout is None or stderr is None:  # pragma: no cover - both are pipes
        raise ToolFailed("The search could not be started.")
    errors = asyncio.ensure_future(_head(stderr, _STDERR_KEEP))
    ended = _Ended.TIMED_OUT
    try:
        async with asyncio.timeout_at(deadline):
            ended = await _pump(stdout, take)
    except TimeoutError:
        ended = _Ended.TIMED_OUT
    finally:
        if ended is not _Ended.FINISHED:
            _kill(process)
        await _reap(process, stdout, errors)
    return _Run(ended, errors.result() if errors.done() else b"")


async def _reap(
    process: asyncio.subprocess.Process,
    stdout: asyncio.StreamReader,
    errors: asyncio.Future[bytes],
) -> None:
    """Drain the pipes so they close, then wait for the process; bounded."""
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            while await stdout.read(_READ_CHUNK):
                pass
            await errors
            await process.wait()
    except TimeoutError:  # pragma: no cover - only a program that closed its output early
        _kill(process)
        errors.cancel()


async def _abandon(starting: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """After a cancel during start: once the process exists, kill its group and reap it."""
    try:
        process = await asyncio.wait_for(asyncio.shield(starting), _DRAIN_SECONDS)
    except (asyncio.CancelledError, TimeoutError, OSError):  # pragma: no cover - rare races
        return
    _kill(process)
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(process.wait(), _DRAIN_SECONDS)


def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill the process's whole group (its own session), unless it was already reaped."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _rg_refusal(stderr: bytes) -> Exception:
    """Why ripgrep refused the pattern or a glob, for the model, in our own words."""
    text = stderr.decode("utf-8", "replace")
    if "size limit" in text:
        return InvalidArgument(
            "The regular expression is too large once compiled; simplify it, or search "
            "for a fixed string.",
        )
    if "not allowed in a regex" in text:
        return InvalidArgument(
            "The pattern would match a line break; search one line at a time.",
        )
    found = _ERROR_LINE.findall(text)
    if "regex parse error" in text:
        detail = found[-1] if found else "it does not parse"
        detail = _PRINTABLE.sub("?", detail)[:160]
        return InvalidArgument(f"The pattern is not a valid regular expression: {detail}.")
    if "glob" in text:
        return InvalidArgument("An include or exclude glob is not valid.")
    return ToolFailed("The search failed.")


# --- the search ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _Query:
    """A search's checked arguments, as ripgrep gets them."""

    pattern: str
    regex: bool
    case: str
    context: int
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    roots: tuple[str, ...]


class TextSearch:
    """Searches file contents beneath one workspace with ripgrep; the body of `search_text`.

    Results come in path order whatever ripgrep's threads did: a search whose matches
    fit within `count_limit` runs in parallel and is sorted here; a larger one is run
    again in order (`--sort path`) and stopped once its page is full, so `skip` pages
    through the same sequence.
    """

    def __init__(self, workspace: Workspace, config: SearchConfig | None = None) -> None:
        config = config or SearchConfig()
        rg = config.rg
        if rg is None:
            raise ConfigurationError("ripgrep (rg) was not found; set SearchConfig.rg")
        if not Path(rg).is_absolute() or not os.access(rg, os.X_OK):
            raise ConfigurationError(f"SearchConfig.rg {rg!r} is not an executable absolute path")
        self._confinement: Confinement | None = None
        if config.confine:
            if config.bwrap is None:
                raise ConfigurationError(
                    "bubblewrap (bwrap) was not found: search_text runs ripgrep where only "
                    "the workspace exists. Install bubblewrap, set SearchConfig.bwrap, or "
                    "set SearchConfig.confine=False to accept that a concurrent writer in "
                    "the workspace can make ripgrep read outside it.",
                )
            self._confinement = Confinement.prepare(
                bwrap=config.bwrap,
                program=rg,
                trial_dir=workspace.root,
            )
        self._workspace = workspace
        self._config = config
        self._rg = rg
        # The workspace's ignore policy as ripgrep overrides: an override outranks the
        # ignore files and hidden-file rules, so an `.ignore` that whitelists `.git` does
        # not bring it back. `_admit` applies the same policy to what ripgrep reports.
        self._ignored = tuple(f"--iglob=!{_rg_glob(p)}" for p in workspace.ignore)

    @property
    def confined(self) -> bool:
        """Whether ripgrep runs where only the workspace exists (see `SearchConfig`)."""
        return self._confinement is not None

    @property
    def config(self) -> SearchConfig:
        """The limits this search runs within."""
        return self._config

    async def search(
        self,
        pattern: str,
        *,
        regex: bool = False,
        paths: Sequence[str] = (),
        case: Case = "smart",
        context: int = 0,
        max_results: int | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        skip: int = 0,
        timeout: float | None = None,
    ) -> SearchResult:
        """Search for `pattern` (a fixed string unless `regex`) beneath `paths`.

        Raises InvalidArgument for arguments out of bounds, a path outside the workspace
        or through a symbolic link, or a pattern or glob ripgrep refuses; NotFound for a
        path that does not exist. `timeout` (seconds) may only shorten the configured one.
        """
        config = self._config
        limit = config.max_matches if max_results is None else max_results
        if not 1 <= limit <= config.max_matches:
            raise InvalidArgument(f"max_results must be 1-{config.max_matches}.")
        if not 0 <= skip <= config.max_skip:
            raise InvalidArgument(f"skip must be 0-{config.max_skip}.")
        query = self._query(
            pattern=pattern,
            regex=regex,
            paths=paths,
            case=case,
            context=context,
            include=include,
            exclude=exclude,
        )
        budget = config.timeout if timeout is None else max(0.0, min(timeout, config.timeout))
        deadline = asyncio.get_running_loop().time() + budget

        def page() -> Page:
            return Page(
                skip=skip,
                limit=limit,
                context=context,
                max_chars=config.max_line_chars,
                budget=config.max_result_chars,
            )

        collect = Collect(self._admit, count_limit=config.count_limit)
        first = await _run(
            self._launch(query, ordered=False),
            cwd=self._workspace.root,
            take=collect.take,
            deadline=deadline,
        )
        if first.ended is _Ended.FINISHED and collect.summary is None:
            raise _rg_refusal(first.stderr)
        if first.ended is not _Ended.STOPPED:
            shown = page()
            collect.replay(shown)
            finished = first.ended is _Ended.FINISHED
            truncated = not finished or skip + len(shown.items) < collect.admitted_matches
            return SearchResult(
                matches=shown.matches(),
                total_matches=collect.admitted_matches,
                files_with_matches=collect.files,
                complete=finished,
                truncated=truncated,
                next_skip=skip + len(shown.items) if finished and truncated else None,
                timed_out=not finished,
                refused_files=collect.refused,
                elapsed_ms=elapsed_ms(collect.summary),
            )
        # More matches than can be held to sort: search again in path order.
        shown = page()
        stream = Stream(self._admit, shown)
        second = await _run(
            self._launch(query, ordered=True),
            cwd=self._workspace.root,
            take=stream.take,
            deadline=deadline,
        )
        finished = second.ended is _Ended.FINISHED and stream.summary is not None
        return SearchResult(
            matches=shown.matches(),
            total_matches=shown.seen if finished else max(shown.seen, collect.matches),
            files_with_matches=stream.files if finished else max(stream.files, collect.files),
            complete=finished,
            truncated=not finished,
            next_skip=None if finished else skip + len(shown.items),
            timed_out=second.ended is _Ended.TIMED_OUT,
            refused_files=stream.refused,
            elapsed_ms=elapsed_ms(stream.summary),
        )

    def command(
        self,
        pattern: str,
        *,
        regex: bool = False,
        paths: Sequence[str] = (),
        case: Case = "smart",
        context: int = 0,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        ordered: bool = False,
    ) -> list[str]:
        """The ripgrep command line such a search runs (`ordered`: its in-order pass).

        The arguments are checked as `search` checks them. For logs and benchmarks; when
        `confined`, bubblewrap's part (see `SearchConfig.confine`) runs in front of it.
        """
        query = self._query(
            pattern=pattern,
            regex=regex,
            paths=paths,
            case=case,
            context=context,
            include=include,
            exclude=exclude,
        )
        return self._argv(query, ordered=ordered)

    def _query(
        self,
        *,
        pattern: str,
        regex: bool,
        paths: Sequence[str],
        case: str,
        context: int,
        include: Sequence[str],
        exclude: Sequence[str],
    ) -> _Query:
        config = self._config
        if not isinstance(pattern, str) or not 1 <= len(pattern) <= config.max_pattern_chars:
            raise InvalidArgument(f"The pattern must be 1-{config.max_pattern_chars} characters.")
        if "\x00" in pattern or "\n" in pattern or "\r" in pattern:
            raise InvalidArgument(
                "The pattern must not contain NUL or line breaks; search one line at a time.",
            )
        if not 0 <= context <= config.max_context:
            raise InvalidArgument(f"context must be 0-{config.max_context} lines.")
        if case not in _CASE_FLAGS:
            raise InvalidArgument("case must be smart, sensitive or insensitive.")
        return _Query(
            pattern=pattern,
            regex=bool(regex),
            case=case,
            context=context,
            include=_globs(include, "include"),
            exclude=_globs(exclude, "exclude"),
            roots=tuple(self._roots(paths)),
        )

    def _roots(self, paths: Sequence[str]) -> list[str]:
        """The paths to search: checked, each a directory or file beneath the root."""
        if len(paths) > _MAX_PATHS:
            raise InvalidArgument(f"Give at most {_MAX_PATHS} paths.")
        files: list[WorkspaceFile] = []
        for path in paths:
            file = self._workspace.relative(path)
            if self._workspace.ignored(file):
                raise InvalidArgument(f"{file.text} is ignored in this workspace.")
            info = self._workspace.stat(file)  # NotFound, or InvalidArgument for a symlink
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                raise InvalidArgument(f"{file.text} is neither a file nor a directory.")
            files.append(file)
        if not files or any(not file.parts for file in files):
            return ["."]
        chosen: list[tuple[str, ...]] = []
        for parts in sorted({file.parts for file in files}, key=sort_key):
            if not any(parts[: len(kept)] == kept for kept in chosen):
                chosen.append(parts)
        return ["/".join(parts) for parts in chosen]

    def _admit(self, parts: tuple[str, ...]) -> bool:
        """Whether a file ripgrep reported may be shown: not ignored, reached without links."""
        file = WorkspaceFile(parts)
        if self._workspace.ignored(file):
            return False
        try:
            info = self._workspace.stat(file)
        except (InvalidArgument, NotFound):
            return False
        return stat.S_ISREG(info.st_mode)

    def _launch(self, query: _Query, *, ordered: bool) -> list[str]:
        """What runs: ripgrep's command line, confined when so configured."""
        argv = self._argv(query, ordered=ordered)
        if self._confinement is None:
            return argv
        return self._confinement.argv(self._workspace.root, argv)

    def _argv(self, query: _Query, *, ordered: bool) -> list[str]:
        """The whole command line, built here; model text only after `=` or `--`."""
        config = self._config
        argv = [
            self._rg,
            "--json",
            "--no-config",
            "--no-follow",
            "--no-messages",
            "--no-require-git",
            "--no-ignore-parent",
            "--no-ignore-global",
            f"--regex-size-limit={config.regex_size_limit}",
            f"--dfa-size-limit={config.dfa_size_limit}",
            _CASE_FLAGS[query.case],
            *self._ignored,
        ]
        if not query.regex:
            argv.append("--fixed-strings")
        if query.context:
            argv.append(f"--context={query.context}")
        for name, chosen, select in (
            (_GLOB_TYPE_INCLUDE, query.include, "--type"),
            (_GLOB_TYPE_EXCLUDE, query.exclude, "--type-not"),
        ):
            if chosen:
                argv.extend(f"--type-add={name}:{glob}" for glob in chosen)
                argv.append(f"{select}={name}")
        if ordered:
            argv.append("--sort=path")
        argv.append(f"--regexp={query.pattern}")
        argv.append("--")
        argv.extend(query.roots)
        return argv


def _rg_glob(pattern: str) -> str:
    """An ignore pattern (one name, no braces or backslashes) in ripgrep's glob syntax.

    Both read `*`, `?` and classes alike within a name; a run of stars is one star.
    """
    return re.sub(r"\*{2,}", "*", pattern)


def _globs(globs: Iterable[str], what: str) -> tuple[str, ...]:
    """File-name globs, checked: they become ripgrep file types, which honour ignore files.

    A `--glob` would override ignore files, so the model's globs are never one. As with
    ripgrep's own types, an include glob can select a hidden file (`.env.example`),
    never an ignored one, and never a file inside a hidden directory such as `.git`.
    """
    chosen = tuple(globs)
    if len(chosen) > _MAX_GLOBS:
        raise InvalidArgument(f"Give at most {_MAX_GLOBS} {what} globs.")
    for glob in chosen:
        if not isinstance(glob, str) or not 1 <= len(glob) <= _MAX_GLOB_CHARS:
            raise InvalidArgument(f"An {what} glob must be 1-{_MAX_GLOB_CHARS} characters.")
        if _FORBIDDEN_GLOB.search(glob):
            raise InvalidArgument(
                f"An {what} glob matches file names, like '*.py': it must not contain '/', "
                f"'\\', ':' or control characters. Choose directories with paths.",
            )
        if glob.startswith("!"):
            raise InvalidArgument("Put a glob to leave out in exclude, without '!'.")
    return chosen


# --- the tool --------------------------------------------------------------------------------


def search_tools(
    workspace: Workspace,
    config: SearchConfig | None = None,
    *,
    namespace: str = "workspace",
) -> list[Tool]:
    """The text-search tools over `workspace`: `search_text` (an L1 read)."""
    searcher = TextSearch(workspace, config)
    limits = searcher.config
    path_item = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
    glob_item = Annotated[str, Field(min_length=1, max_length=_MAX_GLOB_CHARS)]

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace=namespace,
        side_effect=SideEffect.NONE,
        timeout=limits.timeout + _TOOL_TIMEOUT_MARGIN,
        results=ResultPolicy(trust=Trust.UNTRUSTED),
    )
    async def search_text(  # noqa: PLR0917 - its parameters are the model's schema
        ctx: ToolContext,
        pattern: Annotated[
            str,
            Field(
                min_length=1,
                max_length=limits.max_pattern_chars,
                description="Text to find on one line; a regular expression if regex is true.",
            ),
        ],
        regex: Annotated[
            bool,
            Field(description="Read pattern as a regular expression (Rust regex syntax)."),
        ] = False,
        paths: Annotated[
            tuple[path_item, ...],
            Field(
                max_length=_MAX_PATHS,
                description="Files or directories to search, relative to the workspace root; "
                "empty for all.",
            ),
        ] = (),
        case: Annotated[
            Case,
            Field(description="smart: insensitive unless the pattern has capitals."),
        ] = "smart",
        context: Annotated[
            int,
            Field(ge=0, le=limits.max_context, description="Lines to show around each match."),
        ] = 0,
        max_results: Annotated[
            int,
            Field(ge=1, le=limits.max_matches, description="Matching lines to return."),
        ] = limits.max_matches,
        include: Annotated[
            tuple[glob_item, ...],
            Field(max_length=_MAX_GLOBS, description="Only files whose name matches, e.g. *.py."),
        ] = (),
        exclude: Annotated[
            tuple[glob_item, ...],
            Field(max_length=_MAX_GLOBS, description="Leave out files whose name matches."),
        ] = (),
        skip: Annotated[
            int,
            Field(ge=0, le=limits.max_skip, description="Matches to skip: a result's next_skip."),
        ] = 0,
    ) -> SearchResult:
        """Search the contents of the workspace's files for text, like ripgrep.

        Fixed-string matching unless regex is true. Files named in ignore files
        (.gitignore, .ignore), hidden files and binary files are skipped unless named
        in paths; what the workspace ignores (such as .git) is never searched. Matches
        come in path order with line numbers; when truncated is true, call again with
        the same arguments and skip set to next_skip for more.
        """
        return await searcher.search(
            pattern,
            regex=regex,
            paths=paths,
            case=case,
            context=context,
            max_results=max_results,
            include=include,
            exclude=exclude,
            skip=skip,
            timeout=max(0.0, ctx.remaining() - _DEADLINE_MARGIN),
        )

    return [search_text]
