"""Running ripgrep: one process, its output fed line by line, always reaped.

Owns starting ripgrep in its own process group with a clean environment (on the event loop,
or on a given thread whose confinement it inherits, then read and awaited on the loop
through its pipes and a pidfd), feeding its JSON output lines (a read's worth at a
time) to a sink until the sink has enough, killing its process group on a stop, a
timeout or a cancel, and putting its refusals in our own words. It never builds the
command line (`_rg_command` does) and never decides what a match means.

A process group, not a session: on Linux a new session is a scheduling autogroup of its
own, which shares the CPU with the service group by group; that cost a search of 1,000
files 2.5 ms more on a 2-core machine. No terminal reaches ripgrep either way: stdin is
/dev/null and its output goes to pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import Enum
from typing import IO, Protocol

from handrail.errors import InvalidArgument, ToolFailed
from handrail.tools.workspace._rg_json import Line, Lines

__all__ = ["Ended", "Ran", "rg_refusal", "run"]

_READ_CHUNK = 1 << 18
_STDERR_KEEP = 4096
_DRAIN_SECONDS = 5.0
_ERROR_LINE = re.compile(r"^error: (.+)$", re.MULTILINE)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


class Ended(Enum):
    """Why ripgrep's output stopped being read."""

    FINISHED = "finished"
    """ripgrep closed its output."""
    STOPPED = "stopped"
    """The sink had enough; ripgrep was killed."""
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class Ran:
    """How a ripgrep process ended, and the start of what it wrote to stderr."""

    ended: Ended
    stderr: bytes


class _Process(Protocol):
    """What a run needs of a process: asyncio's, or one started on another thread."""

    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class _ThreadStarted:
    """A process started on another thread; its pipes and exit awaited on this loop."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        exited: asyncio.Future[None],
    ) -> None:
        self._popen = popen
        self.stdout: asyncio.StreamReader | None = stdout
        self.stderr: asyncio.StreamReader | None = stderr
        self._exited = exited

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        await asyncio.shield(self._exited)
        return self._popen.wait()  # it has exited: this only reaps


async def _reader(loop: asyncio.AbstractEventLoop, pipe: IO[bytes] | None) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=_READ_CHUNK, loop=loop)
    if pipe is None:  # pragma: no cover - both are pipes
        reader.feed_eof()
        return reader
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


def _exit_of(loop: asyncio.AbstractEventLoop, pid: int) -> asyncio.Future[None]:
    """Done when the process exits (its pidfd becomes readable); the pidfd then closed."""
    exited: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(pid)

    def ready() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, ready)
    return exited


async def _start_on(
    executor: Executor, argv: Sequence[str], cwd: os.PathLike[str] | str
) -> _ThreadStarted:
    """Start the process with Popen on `executor`'s thread (vfork: cheap), then adopt it."""
    loop = asyncio.get_running_loop()

    # Opened here: the restricted thread may not open /dev/null itself.
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # noqa: S603 - a fixed argument vector
            list(argv),
            stdin=devnull,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={},
            process_group=0,
        )

    try:
        popen = await loop.run_in_executor(executor, start)
    finally:
        os.close(devnull)
    try:
        exited = _exit_of(loop, popen.pid)
        stdout = await _reader(loop, popen.stdout)
        stderr = await _reader(loop, popen.stderr)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        await loop.run_in_executor(None, popen.wait)
        raise
    return _ThreadStarted(popen, stdout, stderr, exited)


async def _pump(
    stream: asyncio.StreamReader, take: Callable[[list[Line]], bool], *, runs: bool
) -> Ended:
    lines = Lines()
    split = lines.runs if runs else lines.feed
    while chunk := await stream.read(_READ_CHUNK):
        if take(split(chunk)):
            return Ended.STOPPED
    return Ended.STOPPED if take(lines.close()) else Ended.FINISHED


async def _head(stream: asyncio.StreamReader, keep: int) -> bytes:
    """Read `stream` to its end (so the writer never blocks) and keep its first bytes."""
    kept = bytearray()
    while chunk := await stream.read(_READ_CHUNK):
        kept += chunk[: max(0, keep - len(kept))]
    return bytes(kept)


async def run(
    argv: Sequence[str],
    *,
    cwd: os.PathLike[str] | str,
    take: Callable[[list[Line]], bool],
    deadline: float,
    start_on: Executor | None = None,
    runs: bool = False,
) -> Ran:
    """Run ripgrep, feed its output lines to `take` until it says stop; always reaped.

    `take` gets the lines each read completes, in order, and says True to stop; with
    `runs`, as runs of whole lines (`Lines.runs`) rather than one line per item.
    `start_on` is the executor whose thread starts the process (a thread restricted by
    Landlock, whose domain the process inherits); by default the event loop starts it.
    """
    starting: asyncio.Future[_Process]
    if start_on is not None:
        starting = asyncio.ensure_future(_start_on(start_on, argv, cwd))
    else:
        starting = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env={},
                process_group=0,
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
    except (OSError, subprocess.SubprocessError, RuntimeError):
        # RuntimeError: the starting thread could not be restricted, or was let go.
        raise ToolFailed("The search program could not be started.") from None
    stdout, stderr = process.stdout, process.stderr
    if stdout is None or stderr is None:  # pragma: no cover - both are pipes
        raise ToolFailed("The search could not be started.")
    errors = asyncio.ensure_future(_head(stderr, _STDERR_KEEP))
    ended = Ended.TIMED_OUT
    try:
        async with asyncio.timeout_at(deadline):
            ended = await _pump(stdout, take, runs=runs)
    except TimeoutError:
        ended = Ended.TIMED_OUT
    finally:
        if ended is not Ended.FINISHED:
            _kill(process)
        await _reap(process, stdout, errors)
    return Ran(ended, errors.result() if errors.done() else b"")


async def _reap(
    process: _Process,
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


async def _abandon(starting: asyncio.Future[_Process]) -> None:
    """After a cancel during start: once the process exists, kill its group and reap it."""
    try:
        process = await asyncio.wait_for(asyncio.shield(starting), _DRAIN_SECONDS)
    except (asyncio.CancelledError, TimeoutError, OSError, RuntimeError):  # pragma: no cover
        return
    _kill(process)
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(process.wait(), _DRAIN_SECONDS)


def _kill(process: _Process) -> None:
    """Kill the process's whole group (its own), unless it was already reaped."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def rg_refusal(stderr: bytes) -> Exception:
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
