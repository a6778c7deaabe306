"""Text search beneath a workspace root: `search_text`, run by ripgrep.

Owns the tool and its limits, the search's paths (checked beneath the root, each
reported file checked again) and its two passes: in parallel and sorted here, or in
path order and stopped once a page is full. The command line is built by `_rg_command`,
ripgrep is run by `_rg_process` (confined to the workspace by Landlock or bubblewrap,
`_sandbox_confine`), its JSON read by `_rg_json` and paged by `_search_pages`. It
never writes, and never reports a file reached through a symbolic link or with several
hard links.
"""

# No `from __future__ import annotations`: the tool's parameter annotations name the
# configured limits, and get_type_hints must resolve them from the builder's closure.

import asyncio
import functools
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, get_args

from pydantic import Field

from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.envelope import Trust
from handrail.errors import ConfigurationError, InvalidArgument, NotFound, ToolFailed
from handrail.shaping.policy import ResultPolicy
from handrail.spec import RiskLevel, SideEffect
from handrail.tools._sandbox_confine import Confinement, Launch, Mechanism, chosen
from handrail.tools.workspace._rg_command import (
    CASE_FLAGS,
    MAX_GLOB_CHARS,
    MAX_GLOBS,
    Case,
    Query,
    check_globs,
    rg_argv,
    rg_glob,
)
from handrail.tools.workspace._rg_json import Line, elapsed_ms
from handrail.tools.workspace._rg_process import Ended, Ran, rg_refusal, run
from handrail.tools.workspace._search_pages import (
    Admit,
    Collect,
    ContextLine,
    Page,
    Stream,
    TextMatch,
    sort_key,
)
from handrail.tools.workspace.paths import MAX_PATH_CHARS, Beneath, Workspace, WorkspaceFile

__all__ = [
    "ContextLine",
    "SearchConfig",
    "SearchResult",
    "TextMatch",
    "TextSearch",
    "search_tools",
]

_MAX_PATHS = 16
_DEADLINE_MARGIN = 0.1
_TOOL_TIMEOUT_MARGIN = 2.0


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

    With `confine` (the default) ripgrep can read the workspace and its own files (its
    binary and libraries, which every user may read) and nothing else, and runs without
    any capability: a directory or file of the workspace swapped for a symbolic link
    while ripgrep runs leads nowhere it can read. `confinement` says how: `landlock`
    (kernel rules that a thread of the service takes on and ripgrep inherits when that
    thread starts it; the outside exists but cannot be opened, and TCP, signals out and
    abstract sockets are denied too), `bubblewrap`
    (`bwrap`, by default the one on PATH: a mount namespace where the outside does not
    exist, about 3-5 ms more per search), or `auto` (the default: Landlock when the
    kernel has version 6 or later, else bubblewrap). Landlock does not cover UDP or
    other non-TCP sockets (root's raw sockets go with its capabilities): ripgrep, a
    trusted program, opens none, but where even that must be impossible choose
    bubblewrap, whose network namespace is empty. A workspace file only another user
    may read is then not searched. `confine=False` runs ripgrep on the host and accepts
    a race: ripgrep opens checked paths by name, so a concurrent writer in the
    workspace can make it read files outside it.
    """

    rg: str | None = field(default_factory=_which_rg)
    bwrap: str | None = field(default_factory=_which_bwrap)
    confine: bool = True
    confinement: Mechanism = "auto"
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
        if self.confinement not in get_args(Mechanism):
            raise ConfigurationError(
                "a search config's confinement must be auto, landlock or bubblewrap"
            )
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


# --- the search ------------------------------------------------------------------------------


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
            if chosen(config.confinement) == "bubblewrap" and config.bwrap is None:
                raise ConfigurationError(
                    "bubblewrap (bwrap) was not found and this kernel's Landlock cannot "
                    "confine ripgrep: search_text runs ripgrep where it can read only the "
                    "workspace. Install bubblewrap, set SearchConfig.bwrap, or set "
                    "SearchConfig.confine=False to accept that a concurrent writer in the "
                    "workspace can make ripgrep read outside it.",
                )
            self._confinement = Confinement.prepare(
                bwrap=config.bwrap,
                program=rg,
                trial_dir=workspace.root,
                mechanism=config.confinement,
            )
        self._workspace = workspace
        self._config = config
        self._rg = rg
        # The workspace's ignore policy as ripgrep overrides: an override outranks the
        # ignore files and hidden-file rules, so an `.ignore` that whitelists `.git` does
        # not bring it back. `_admit` applies the same policy to what ripgrep reports.
        self._ignored = tuple(f"--iglob=!{rg_glob(p)}" for p in workspace.ignore)

    @property
    def confined(self) -> bool:
        """Whether ripgrep can read only the workspace (see `SearchConfig`)."""
        return self._confinement is not None

    @property
    def confined_by(self) -> str | None:
        """`landlock` or `bubblewrap`, whichever confines ripgrep; None when unconfined."""
        return None if self._confinement is None else self._confinement.mechanism

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

        with Beneath(self._workspace) as beneath:
            return await self._run(
                query,
                page=page,
                admit=functools.partial(self._admit, beneath=beneath),
                skip=skip,
                deadline=deadline,
            )

    async def _run(
        self,
        query: Query,
        *,
        page: Callable[[], Page],
        admit: Admit,
        skip: int,
        deadline: float,
    ) -> SearchResult:
        """Both passes of `search`: in parallel and sorted here, else in path order."""
        config = self._config
        collect = Collect(admit, count_limit=config.count_limit)
        first = await self._pass(query, ordered=False, take=collect.take_runs, deadline=deadline)
        if first.ended is Ended.FINISHED and collect.summary is None:
            raise rg_refusal(first.stderr)
        if first.ended is not Ended.STOPPED:
            shown = page()
            collect.replay(shown)
            finished = first.ended is Ended.FINISHED
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
        stream = Stream(admit, shown)
        second = await self._pass(query, ordered=True, take=stream.take_all, deadline=deadline)
        finished = second.ended is Ended.FINISHED and stream.summary is not None
        return SearchResult(
            matches=shown.matches(),
            total_matches=shown.seen if finished else max(shown.seen, collect.matches),
            files_with_matches=stream.files if finished else max(stream.files, collect.files),
            complete=finished,
            truncated=not finished,
            next_skip=None if finished else skip + len(shown.items),
            timed_out=second.ended is Ended.TIMED_OUT,
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
        `confined`, bubblewrap's part runs in front of it, or a thread restricted by
        Landlock starts it (see `SearchConfig.confine`).
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
    ) -> Query:
        config = self._config
        if not isinstance(pattern, str) or not 1 <= len(pattern) <= config.max_pattern_chars:
            raise InvalidArgument(f"The pattern must be 1-{config.max_pattern_chars} characters.")
        if "\x00" in pattern or "\n" in pattern or "\r" in pattern:
            raise InvalidArgument(
                "The pattern must not contain NUL or line breaks; search one line at a time.",
            )
        if not 0 <= context <= config.max_context:
            raise InvalidArgument(f"context must be 0-{config.max_context} lines.")
        if case not in CASE_FLAGS:
            raise InvalidArgument("case must be smart, sensitive or insensitive.")
        return Query(
            pattern=pattern,
            regex=bool(regex),
            case=case,
            context=context,
            include=check_globs(include, "include"),
            exclude=check_globs(exclude, "exclude"),
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

    def _admit(self, parts: tuple[str, ...], *, beneath: Beneath) -> bool:
        """Whether a file ripgrep reported may be shown: not ignored, reached without links."""
        file = WorkspaceFile(parts)
        if self._workspace.ignored(file):
            return False
        try:
            info = beneath.stat(file)
        except (InvalidArgument, NotFound):
            return False
        return stat.S_ISREG(info.st_mode)

    async def _pass(
        self,
        query: Query,
        *,
        ordered: bool,
        take: Callable[[list[Line]], bool],
        deadline: float,
    ) -> Ran:
        """One run of ripgrep over the workspace, confined as configured.

        The unordered pass is read in runs of lines (`Collect.take_runs`), the ordered
        one line by line (`Stream.take_all`).
        """
        launch = self._launch(query, ordered=ordered)
        return await run(
            launch.argv,
            cwd=self._workspace.root,
            take=take,
            deadline=deadline,
            start_on=launch.start_on,
            runs=not ordered,
        )

    def _launch(self, query: Query, *, ordered: bool) -> Launch:
        """What runs: ripgrep's command line, confined when so configured."""
        argv = self._argv(query, ordered=ordered)
        if self._confinement is None:
            return Launch(argv, None)
        try:
            return self._confinement.launch(self._workspace.root, argv)
        except OSError:
            raise ToolFailed("The search could not be confined to the workspace.") from None

    def _argv(self, query: Query, *, ordered: bool) -> list[str]:
        """The whole command line, built by `rg_argv`; model text only after `=` or `--`."""
        config = self._config
        return rg_argv(
            self._rg,
            query,
            ordered=ordered,
            regex_size_limit=config.regex_size_limit,
            dfa_size_limit=config.dfa_size_limit,
            ignored=self._ignored,
        )


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
    glob_item = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_CHARS)]

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
            Field(max_length=MAX_GLOBS, description="Only files whose name matches, e.g. *.py."),
        ] = (),
        exclude: Annotated[
            tuple[glob_item, ...],
            Field(max_length=MAX_GLOBS, description="Leave out files whose name matches."),
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
