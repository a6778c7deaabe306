"""Read a line a test's child process writes to a FIFO: a failure, never a hang, if none comes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

__all__ = ["read_line"]


async def read_line(fifo: Path, *, timeout: float = 30.0) -> bytes:
    """The first line written to `fifo` (with its line break); TimeoutError after `timeout`.

    Read without blocking: a thread blocked opening a FIFO that nobody writes would
    outlive the test and hold the whole run at exit.
    """
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        async with asyncio.timeout(timeout):
            while not data.endswith(b"\n"):
                try:
                    chunk = os.read(fd, 64)
                except BlockingIOError:
                    chunk = b""
                data += chunk
                if not chunk:
                    await asyncio.sleep(0.01)
        return data
    finally:
        os.close(fd)
