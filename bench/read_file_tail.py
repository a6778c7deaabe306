"""read_file(tail=50) of a large text file: wall time and peak memory, next to `tail -n 50`.

A log-like text file of `--size-mb` MiB is written to a temporary directory (free space
is checked first; the file is deleted afterwards unless `--keep-file`). Each round then
runs, one after the other, in fresh processes:

  tail            `tail -n 50 FILE` (GNU coreutils seeks back from the end): the wall
                  time of the whole process and its peak RSS (from wait4)
  python_whole    a child reads the whole file into memory and keeps its last 50 lines
                  (the naive way); seconds of that read, its tracemalloc peak, peak RSS
  handrail        a child calls `workspace.read_file(tail=50)` through a Gate, as a
                  model would (shaping and redaction included); seconds of the call,
                  tracemalloc peak of one call, peak RSS
  handrail_tool   the same tool invoked without the gate: the read alone

Every path's 50 lines are checked to be the same. In-process times are medians over
`--repeat` calls after one warm-up (the page cache is warm for every path alike). Each
child reports its peak RSS after imports and setup and again at the end; the growth is
what the reads cost. Processes run under /usr/bin/time where it exists: a process forked
straight from this interpreter would count its pre-exec copy of it in its peak RSS.
Reported: medians over rounds, and ratios to `tail` and to `python_whole`. Nothing
here asserts a time.

    .venv/bin/python bench/read_file_tail.py                          # 100 MiB, 3 rounds
    .venv/bin/python bench/read_file_tail.py --size-mb 8 --rounds 1 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PATHS = ("tail", "python_whole", "handrail", "handrail_tool")
MIB = 1024 * 1024
TAIL = 50
SPARE = 64 * MIB
"""Free space kept beyond the file itself."""
FILE_NAME = "big.log"
TIME = "/usr/bin/time"


# --- the file ----------------------------------------------------------------------------------


def _block(number: int) -> bytes:
    """About 1 MiB of numbered log lines."""
    lines = [
        f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z INFO worker-{i % 8} block={number} "
        f"line={i} path=/api/v1/items/{i * 7 % 9_973} status=200 duration_ms={i * 13 % 900}\n"
        for i in range(11_000)
    ]
    return "".join(lines).encode()


def text_pieces(size: int) -> Iterator[bytes]:
    """Exactly `size` bytes of log text ending in a newline, in pieces of about 1 MiB."""
    left = size
    number = 0
    while left > 0:
        piece = _block(number)[:left]
        left -= len(piece)
        number += 1
        if left == 0 and not piece.endswith(b"\n"):
            piece = piece[:-1] + b"\n"
        yield piece


def write_text(path: Path, size: int) -> None:
    with path.open("wb") as out:
        for piece in text_pieces(size):
            out.write(piece)


# --- the children ------------------------------------------------------------------------------


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(call: Callable[[], list[str]], repeat: int) -> tuple[float, list[str]]:
    lines = call()  # warm-up
    seconds = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        lines = call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), lines


def _traced(call: Callable[[], list[str]]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / MIB


def _python_whole(path: Path) -> Callable[[], list[str]]:
    def call() -> list[str]:
        with path.open("rb") as handle:
            data = handle.read()
        return [line.decode() for line in data.splitlines()[-TAIL:]]

    return call


def _handrail(path: Path, *, through_gate: bool) -> Callable[[], list[str]]:
    from handrail import Gate, Principal, Registry, Status, ToolCall  # noqa: PLC0415
    from handrail.clock import SystemClock  # noqa: PLC0415
    from handrail.context import ToolContext  # noqa: PLC0415
    from handrail.tools.workspace.files import WorkspaceConfig, read_tools  # noqa: PLC0415
    from handrail.tools.workspace.paths import Workspace  # noqa: PLC0415

    root = path.parent
    [_, read_file] = read_tools(Workspace(root), WorkspaceConfig(root=root))
    principal = Principal(user_id="bench", tenant_id="bench")
    arguments = {"path": path.name, "tail": TAIL}
    if through_gate:
        registry = Registry()
        registry.register(read_file)
        gate = Gate(registry)

        def call() -> list[str]:
            envelope = asyncio.run(
                gate.handle(ToolCall(id="c1", name=read_file.name, arguments=arguments), principal)
            )
            assert envelope.status is Status.OK, envelope.summary
            return list(envelope.data["lines"])

        return call

    clock = SystemClock()

    def direct() -> list[str]:
        ctx = ToolContext(
            principal=principal,
            call_id="c1",
            tool=read_file.name,
            deadline=clock.monotonic() + 60,
            clock=clock,
        )
        result: Any = asyncio.run(read_file.invoke(read_file.bind(dict(arguments)), ctx))
        return list(result["lines"])

    return direct


def _child(mode: str, path: Path, repeat: int) -> int:
    """Measure one path and print the result as JSON on one line."""
    if mode == "python_whole":
        call = _python_whole(path)
    else:
        call = _handrail(path, through_gate=mode == "handrail")
    setup = _peak_rss_mib()  # imports and setup done, nothing read yet
    seconds, lines = _timed(call, repeat)
    traced = _traced(call)
    out = {
        "seconds": seconds,
        "tracemalloc_peak_mib": traced,
        "setup_rss_mib": setup,
        "peak_rss_mib": _peak_rss_mib(),
        "lines": lines,
    }
    print(json.dumps(out))
    return 0


def _peak_of(command: list[str]) -> tuple[float | None, str]:
    """Run `command` under /usr/bin/time: its peak RSS in MiB (None without it), stdout.

    A process forked from this (large) interpreter would count the copy of it that
    existed before exec in its own peak RSS; /usr/bin/time forks from a tiny process.
    """
    if not Path(TIME).exists():
        done = subprocess.run(command, capture_output=True, text=True, check=True)  # noqa: S603
        return None, done.stdout
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        timed = [TIME, "-f", "%M", "-o", rss.name, *command]
        done = subprocess.run(timed, capture_output=True, text=True, check=True)  # noqa: S603
        kib = float(rss.read().split()[-1])
    return kib / 1024, done.stdout


def _run_child(mode: str, path: Path, repeat: int) -> dict[str, Any]:
    # Under /usr/bin/time too, so that the child's own peak RSS is its own.
    command = [sys.executable, __file__, "--child", mode, "--repeat", str(repeat), str(path)]
    _, stdout = _peak_of(command)
    result: dict[str, Any] = json.loads(stdout)
    return result


def _run_tail(path: Path) -> dict[str, Any]:
    command = ["tail", "-n", str(TAIL), str(path)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)  # noqa: S603
    seconds = time.perf_counter() - start
    peak, _ = _peak_of(command)
    return {"seconds": seconds, "peak_rss_mib": peak, "lines": done.stdout.splitlines()}


# --- the report ---------------------------------------------------------------------------------


def _median(rounds: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rounds))


def _measure(path: Path, rounds: int, repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PATHS}
    for _ in range(rounds):
        runs["tail"].append(_run_tail(path))
        for name in PATHS[1:]:
            runs[name].append(_run_child(name, path, repeat))
    expected = runs["tail"][0]["lines"]
    for name in PATHS:
        for run in runs[name]:
            if run.pop("lines") != expected:
                msg = f"{name} did not return the same last {TAIL} lines as tail"
                raise AssertionError(msg)
    results: dict[str, Any] = {}
    for name in PATHS:
        peak = _median(runs[name], "peak_rss_mib") if runs[name][0]["peak_rss_mib"] else None
        item: dict[str, Any] = {
            "rounds_s": [r["seconds"] for r in runs[name]],
            "median_s": _median(runs[name], "seconds"),
            "peak_rss_mib": peak,
        }
        if name != "tail":
            item["tracemalloc_peak_mib"] = _median(runs[name], "tracemalloc_peak_mib")
            item["setup_rss_mib"] = _median(runs[name], "setup_rss_mib")
            item["rss_growth_mib"] = _median(runs[name], "peak_rss_mib") - item["setup_rss_mib"]
        results[name] = item
    ratios = {
        f"{name}_vs_{base}": results[name]["median_s"] / results[base]["median_s"]
        for name in ("handrail", "handrail_tool")
        for base in ("tail", "python_whole")
    }
    return {"results": results, "ratios": ratios}


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} MiB"


def _print(payload: dict[str, Any]) -> None:
    size = payload["size_bytes"] / MIB
    print(f"read_file(tail={TAIL}) of a {size:.0f} MiB file, {payload['rounds']} round(s)")
    print(f"{'path':<15}{'median':>12}{'tracemalloc peak':>18}{'peak RSS':>14}{'RSS growth':>14}")
    for name, item in payload["results"].items():
        print(
            f"{name:<15}{item['median_s'] * 1000:>9.2f} ms"
            f"{_mib(item.get('tracemalloc_peak_mib')):>18}"
            f"{_mib(item['peak_rss_mib']):>14}{_mib(item.get('rss_growth_mib')):>14}"
        )
    print("RSS growth: peak RSS of the child minus its RSS after imports and setup")
    for name, ratio in payload["ratios"].items():
        print(f"{name}: {ratio:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per child")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the file")
    parser.add_argument("--keep-file", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--child", choices=PATHS[1:])
    parser.add_argument("path", nargs="?", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.path, args.repeat)

    size = args.size_mb * MIB
    base = args.dir or Path(tempfile.gettempdir())
    if shutil.disk_usage(base).free < size + SPARE:
        print(f"not enough free space in {base} for {args.size_mb} MiB", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="handrail-tail-", dir=base))
    path = workdir / FILE_NAME
    try:
        write_text(path, size)
        measured = _measure(path, args.rounds, args.repeat)
    finally:
        if not args.keep_file:
            shutil.rmtree(workdir)
    payload = {
        "size_bytes": size,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "tail_lines": TAIL,
        "python": platform.python_version(),
        "machine": platform.machine(),
        **measured,
    }
    _print(payload)
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
