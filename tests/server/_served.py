"""`handrail serve` in its own OS process, as the tests of the real server start it.

`start_serving(config, env=..., cwd=...)` starts `handrail serve --config` with stderr
piped; `Served` reads that stderr on a thread, so `wait_for(pattern)` finds the line
saying where it listens, and `ready()` polls /readyz until it answers 200. Every wait
is bounded by `WAIT_S`, generous for a loaded machine, and never reached when it works.
`Served.kill()` ends the process (if it still runs) and closes its pipe.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from queue import Empty, Queue

import httpx
import pytest

WAIT_S = 120.0
"""A generous bound for the server to start or stop on a loaded machine."""
HANDRAIL = str(Path(sys.executable).with_name("handrail"))
REPOSITORY = Path(__file__).parents[2]
_API_LINE = r"serving the API on (http://127\.0\.0\.1:\d+)/v1"


class Served:
    """One `handrail serve` process and what it said on stderr."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: Queue[str | None] = Queue()
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)
        self.lines.put(None)  # the process closed stderr: it is ending

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first stderr line matching `pattern` (bounded wait)."""
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except Empty:
                pytest.fail(f"handrail serve never said {pattern!r}; it said {self.said}")
            if line is None:
                pytest.fail(f"handrail serve ended before saying {pattern!r}: {self.said}")
            self.said.append(line)
            if (found := re.search(pattern, line)) is not None:
                return found

    def ready(self) -> str:
        """The base URL, once the server said it and its /readyz answers 200."""
        url = self.wait_for(_API_LINE).group(1)
        deadline = time.monotonic() + WAIT_S
        with httpx.Client(base_url=url) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        return url
                except httpx.TransportError:
                    pass
                assert self.process.poll() is None, f"handrail serve exited: {self.said}"
                assert time.monotonic() < deadline, f"{url}/readyz never answered 200"
                time.sleep(0.05)

    def stop(self, sig: signal.Signals) -> int:
        """Send `sig`; the exit code (bounded wait)."""
        self.process.send_signal(sig)
        return self.process.wait(timeout=WAIT_S)

    def kill(self) -> None:
        """End the process if it still runs, and close its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT_S)
        assert self.process.stderr is not None
        self.process.stderr.close()


def start_serving(config: Path, *, env: Mapping[str, str], cwd: Path = REPOSITORY) -> Served:
    """`handrail serve --config config` started in `cwd` with environment `env`."""
    process = subprocess.Popen(  # noqa: S603 - our own CLI, an argument list
        [HANDRAIL, "serve", "--config", str(config)],
        env=dict(env),
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Served(process)
