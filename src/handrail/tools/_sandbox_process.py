"""One sandboxed child process, seen from the host: started, read, awaited and killed.

Owns the fork (with what the child does before exec: join its control groups, lower
its limits, drop root), reading stdout and stderr on the event loop within a shared
byte budget so the writer never blocks, waiting for the end through a pidfd, and
killing the process group. It never decides what runs or with which protections.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from handrail.shaping.excerpt import Excerpt, ExcerptBuilder, ExcerptLimits

__all__ = ["Budget", "Child", "Ending", "Output", "Rlimit", "child_setup", "ended", "settle"]

Rlimit = tuple[int, tuple[int, int]]
"""(resource.RLIMIT_*, (soft, hard))."""
Ending = Literal["exited", "timeout", "output", "disk"]

_CHUNK_BYTES = 1 << 16
_REAP_TIMEOUT_S = 10.0
_DRAIN_TIMEOUT_S = 2.0
_POLL_S = 0.02
_FULL_POLL_S = 0.05
"""How often a run's writable space is looked at: the kernel bounds it, this only reports."""


def child_setup(
    procs_files: Sequence[str],
    rlimits: Sequence[Rlimit],
    drop: tuple[int, int] | None,
) -> Callable[[], None]:
    """What the child does between fork and exec: join its groups, set limits, drop root.

    The child joins the groups itself, so that it cannot fork before it is in them. It
    only makes system calls: no import, no allocation worth a lock.
    """
    files, limits = tuple(procs_files), tuple(rlimits)

    def setup() -> None:  # pragma: no cover - runs in the child, between fork and exec
        for path in files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        for kind, value in limits:
            resource.setrlimit(kind, value)
        if drop is not None:
            uid, gid = drop
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)

    return setup


class Budget:
    """The output cap shared by stdout and stderr."""

    __slots__ = ("cap", "exceeded", "total")

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.total = 0
        self.exceeded = asyncio.Event()

    def take(self, size: int) -> int:
        """Count `size` more bytes; how many of them still fit under the cap."""
        before = self.total
        self.total += size
        if self.cap is None:
            return size
        if self.total > self.cap:
            self.exceeded.set()
        return max(0, min(size, self.cap - before))


class Output:
    """One stream: counted in bytes, decoded as UTF-8, kept as a bounded excerpt."""

    __slots__ = ("builder", "bytes", "decoder")

    def __init__(self, limits: ExcerptLimits) -> None:
        self.builder = ExcerptBuilder(limits, failures=True)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.bytes = 0

    def feed(self, data: bytes) -> None:
        """Decode and keep (within the excerpt's bounds) the next bytes read."""
        self.builder.feed(self.decoder.decode(data))

    def excerpt(self) -> Excerpt:
        """The excerpt of everything fed."""
        self.builder.feed(self.decoder.decode(b"", final=True))
        return self.builder.finish()


class Pipe:
    """Reads one pipe on the event loop until end of file, never blocking the writer."""

    __slots__ = ("_budget", "_fd", "_loop", "_output", "done")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        output: Output,
        budget: Budget,
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._output = output
        self._budget = budget
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self._output.bytes += len(chunk)
        kept = self._budget.take(len(chunk))
        if kept:
            self._output.feed(chunk[:kept])

    def close(self) -> None:
        """Stop reading and close the pipe (a writer left over then gets EPIPE)."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        _resolve(self.done)


class Child:
    """A started command, its two pipes being read, until it is reaped and closed."""

    __slots__ = ("pipes", "process")

    def __init__(self, process: subprocess.Popen[bytes], pipes: tuple[Pipe, Pipe]) -> None:
        self.process = process
        self.pipes = pipes

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        setup: Callable[[], None],
        outputs: tuple[Output, Output],
        budget: Budget,
        pass_fds: Sequence[int] = (),
    ) -> Child:
        """Fork and exec `argv` in a session of its own; OSError if it cannot be executed.

        `pass_fds` stay open in the child (bubblewrap's info and block descriptors).
        """
        out_read, out_write = os.pipe2(os.O_CLOEXEC)
        err_read, err_write = os.pipe2(os.O_CLOEXEC)
        loop = asyncio.get_running_loop()
        try:
            process = subprocess.Popen(  # noqa: S603 - an argument vector from configuration
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=err_write,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                preexec_fn=setup,  # noqa: PLW1509 - joins control groups before exec
                umask=0o022,
                pass_fds=tuple(pass_fds),
            )
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        stdout, stderr = outputs
        pipes = (Pipe(loop, out_read, stdout, budget), Pipe(loop, err_read, stderr, budget))
        return cls(process, pipes)

    async def supervise(
        self,
        budget: Budget,
        limit: float,
        *,
        full: Callable[[], bool] | None = None,
    ) -> Ending:
        """Wait for the end of the command, the timeout, the output cap or a full disk.

        Whichever came first. `full` tells whether the run's writable space is full.
        """
        exited = asyncio.ensure_future(ended(self.process))
        capped = asyncio.ensure_future(budget.exceeded.wait())
        filled = asyncio.ensure_future(_until_full(full))
        waits = {exited, capped, filled}
        try:
            done, _ = await asyncio.wait(waits, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await settle(list(waits))
        if exited in done:
            return "exited"
        if capped in done:
            return "output"
        return "disk" if filled in done else "timeout"

    def kill_group(self) -> None:
        """SIGKILL the command's process group, unless the command was reaped already."""
        if self.process.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def reap(self) -> int | None:
        """Reap the (killed) command; None if it does not end within a bound."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended(self.process), _REAP_TIMEOUT_S)
        return self.process.poll()

    async def drain(self) -> None:
        """Let the readers reach end of file, then close what a stray process holds open."""
        pending = [pipe.done for pipe in self.pipes if not pipe.done.done()]
        if pending:
            await asyncio.wait(pending, timeout=_DRAIN_TIMEOUT_S)
        self.close()

    def close(self) -> None:
        """Close both pipes."""
        for pipe in self.pipes:
            pipe.close()


async def ended(process: subprocess.Popen[bytes]) -> None:
    """Return when the process has ended (without reaping it)."""
    try:
        fd = os.pidfd_open(process.pid)
    except OSError:  # no pidfd on this kernel; the pid stays ours until it is reaped
        while process.poll() is None:  # noqa: ASYNC110 - nothing to wait on but the poll
            await asyncio.sleep(_POLL_S)
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _resolve, done)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _until_full(full: Callable[[], bool] | None) -> None:
    """Return once `full()` holds; never without one."""
    if full is None:
        await asyncio.Event().wait()
        return
    while not full():  # noqa: ASYNC110 - the kernel has no event for a full filesystem
        await asyncio.sleep(_FULL_POLL_S)


async def settle(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for the futures to end, whatever their outcome, and mark failures seen."""
    pending = [future for future in futures if not future.done()]
    if pending:
        await asyncio.wait(pending)
    for future in futures:
        if not future.cancelled():
            future.exception()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
