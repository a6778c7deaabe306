"""Running ripgrep: one process, its output fed line by line, always reaped.

Owns starting ripgrep in its own session with a clean environment, feeding its JSON
output lines (a read's worth at a time) to a sink until the sink has enough, killing
its process group on a stop, a timeout or a cancel, and putting its refusals in our own
words. It never builds the command line (`_rg_command` does) and never decides what a
match means.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

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


async def _pump(stream: asyncio.StreamReader, take: Callable[[list[Line]], bool]) -> Ended:
    lines = Lines()
    while chunk := await stream.read(_READ_CHUNK):
        if take(lines.feed(chunk)):
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
) -> Ran:
    """Run ripgrep, feed its output lines to `take` until it says stop; always reaped.

    `take` gets the lines each read completes, in order, and says True to stop.
    """
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
    ended = Ended.TIMED_OUT
    try:
        async with asyncio.timeout_at(deadline):
            ended = await _pump(stdout, take)
    except TimeoutError:
        ended = Ended.TIMED_OUT
    finally:
        if ended is not Ended.FINISHED:
            _kill(process)
        await _reap(process, stdout, errors)
    return Ran(ended, errors.result() if errors.done() else b"")


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
