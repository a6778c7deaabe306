"""Shaping a large log into a 16 KB view: throughput and peak memory, next to `wc`.

A log-like text file of `--size-mb` MiB is written to a temporary directory (free space
is checked first; the file is deleted afterwards unless `--keep-file`). Each round then
measures, one after the other:

  wc -c FILE        wall time of the process (GNU wc takes a regular file's size from
                    fstat/lseek and reads no data: a floor, not a reader)
  wc -l FILE        wall time of the process (reads every byte: the streaming baseline)
  shape file        a tool returns TextStream.from_path(FILE, kind=LOG) and the Shaper
                    (as the gate uses it: excerpt, redaction, budget) turns it into an
                    envelope whose data fits 16,384 characters, in a fresh child process
  shape generator   the same bytes from a Python generator (no file), in a child process

Each child reports its own wall time for the shaping alone and its peak RSS
(getrusage(RUSAGE_SELF).ru_maxrss); an idle child that only imports the module gives
the interpreter's own RSS. Reported: medians over rounds of MiB/s, the ratio of shaping
time to wc time, and peak RSS in MiB (target: below 100 MiB). Nothing asserts a time.

    .venv/bin/python bench/shape_stream.py                      # 1 GiB, 3 rounds
    .venv/bin/python bench/shape_stream.py --size-mb 64 --rounds 1 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from handrail.declare.definition import tool
from handrail.principal import Principal
from handrail.shaping.budget import json_size
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.shaping.stream import StreamKind, TextStream
from handrail.spec import RiskLevel


@tool(risk=RiskLevel.L0_PUBLIC_READ, name="build_log")
async def _build_log() -> None:
    """The tool whose result is shaped (its spec only; the stream is passed in)."""


MIB = 1024 * 1024
MAX_CHARS = 16_384
RSS_TARGET_MIB = 100
CHUNK = 64 * 1024
SPARE = 256 * MIB
"""Free space kept beyond the file itself."""
TRAILER = b"Process finished with exit code 1\n"


# --- the log -------------------------------------------------------------------------------


def _block() -> bytes:
    """About 1 MiB of log lines: levels, ids, paths, durations, and some near misses."""
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARN")
    lines = []
    for i in range(8_000):
        lines.append(
            f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z {levels[i % 5]:5} "
            f"worker-{i % 8} request id={(i * 2_654_435_761) % 2**48:012x} "
            f"path=/api/v1/items/{i * 7 % 9_973} status=200 duration_ms={i * 13 % 900}\n"
        )
        if i % 1_000 == 7:
            lines.append("retry summary: error_count=0 failed=0\n")
    return "".join(lines).encode()


def _endless() -> Iterator[bytes]:
    block = _block()
    for number in itertools.count():
        for start in range(0, len(block), CHUNK):
            yield block[start : start + CHUNK]
        yield f"FAILED tests/test_mod_{number}.py::test_case - AssertionError\n".encode()


def log_pieces(size: int) -> Iterator[bytes]:
    """Exactly `size` bytes of log in pieces of at most CHUNK bytes, one failing test per MiB."""
    body = max(size - len(TRAILER), 0)
    for piece in _endless():
        if body <= 0:
            break
        part = piece[:body]
        body -= len(part)
        yield part
    yield TRAILER[:size]


def write_log(path: Path, size: int) -> None:
    with path.open("wb") as out:
        for piece in log_pieces(size):
            out.write(piece)


# --- the child process -----------------------------------------------------------------------


def _child(mode: str, path: str, size: int) -> int:
    """Shape once and print what it took, as JSON on one line."""
    shaper = Shaper(redactor=Redactor(hash_key=b"b" * 32), max_chars=MAX_CHARS)
    principal = Principal(user_id="bench", tenant_id="bench")
    if mode == "idle":
        seconds, envelope = 0.0, None
    else:
        if mode == "file":
            stream = TextStream.from_path(path, kind=StreamKind.LOG, chunk_size=CHUNK)
        else:
            stream = TextStream(log_pieces(size), kind=StreamKind.LOG, chunk_size=CHUNK)
        start = time.perf_counter()
        envelope = asyncio.run(
            shaper.shape(call_id="b", spec=_build_log.spec, principal=principal, result=stream)
        )
        seconds = time.perf_counter() - start
    report: dict[str, object] = {
        "seconds": seconds,
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    if envelope is not None:
        data = envelope.data
        report["excerpt"] = {
            "status": envelope.status.value,
            "data_json_chars": json_size(data),
            "text_chars": len(data["text"]),
            "total_chars": data["chars"],
            "total_lines": data["lines"],
            "failures": len(data["failures"]),
            "failed_tests": len(data["failed_tests"]),
            "exit_code": data["exit_code"],
            "redacted": dict(envelope.redacted),
        }
    print(json.dumps(report))
    return 0


def _run_child(mode: str, path: Path, size: int) -> tuple[float, float, object, float]:
    """Shaping seconds, peak RSS in MiB and excerpt counts reported by a child; its wall time."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--child-path",
        str(path),
        "--child-size",
        str(size),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)  # noqa: S603
    wall = time.perf_counter() - start
    report = json.loads(done.stdout)
    return float(report["seconds"]), int(report["max_rss_kib"]) / 1024, report.get("excerpt"), wall


def _wc(flag: str, path: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["wc", flag, str(path)], capture_output=True, check=True)  # noqa: S603, S607
    return time.perf_counter() - start


# --- the benchmark ---------------------------------------------------------------------------


def _summary(seconds: list[float], size: int) -> dict[str, object]:
    median = statistics.median(seconds)
    return {
        "median_s": round(median, 4),
        "mib_per_s": round(size / MIB / median, 1) if median > 0 else None,
        "rounds_s": [round(s, 4) for s in seconds],
    }


def measure(path: Path, size: int, rounds: int) -> dict[str, object]:
    """Run the rounds on the file at `path` and return the JSON payload."""
    times: dict[str, list[float]] = {
        "wc_c": [],
        "wc_l": [],
        "shape_file": [],
        "shape_generator": [],
    }
    walls: dict[str, list[float]] = {"shape_file": [], "shape_generator": []}
    rss: dict[str, list[float]] = {"shape_file": [], "shape_generator": []}
    excerpt: object = None
    _, idle_rss, _, _ = _run_child("idle", path, size)
    for _ in range(rounds):
        times["wc_c"].append(_wc("-c", path))
        times["wc_l"].append(_wc("-l", path))
        for key, mode in (("shape_file", "file"), ("shape_generator", "generator")):
            seconds, peak_rss, excerpt, wall = _run_child(mode, path, size)
            times[key].append(seconds)
            walls[key].append(wall)
            rss[key].append(peak_rss)
    results: dict[str, dict[str, object]] = {key: _summary(s, size) for key, s in times.items()}
    for key, seconds_list in walls.items():
        results[key]["process_median_s"] = round(statistics.median(seconds_list), 4)
        results[key]["peak_rss_mib"] = round(max(rss[key]), 1)
        results[key]["rounds_rss_mib"] = [round(r, 1) for r in rss[key]]
    median = {key: statistics.median(s) for key, s in times.items()}
    ratios = {
        f"{shape}_vs_{wc}": round(median[shape] / median[wc], 1) if median[wc] > 0 else None
        for shape in ("shape_file", "shape_generator")
        for wc in ("wc_c", "wc_l")
    }
    peak = max(*rss["shape_file"], *rss["shape_generator"])
    return {
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "size_bytes": size,
        "size_mib": round(size / MIB, 1),
        "rounds": rounds,
        "max_chars": MAX_CHARS,
        "results": results,
        "ratios": ratios,
        "idle_rss_mib": round(idle_rss, 1),
        "rss_target_mib": RSS_TARGET_MIB,
        "rss_within_target": peak < RSS_TARGET_MIB,
        "excerpt": excerpt,
    }


def _print(payload: dict[str, object]) -> None:
    results = payload["results"]
    assert isinstance(results, dict)
    print(
        f"Shaping {payload['size_mib']} MiB of log into a {MAX_CHARS}-char view; "
        f"{payload['rounds']} rounds; medians. Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs."
    )
    print()
    print(f"{'path':<18}{'median s':>10}{'MiB/s':>10}{'peak RSS MiB':>14}")
    for key, row in results.items():
        rss = row.get("peak_rss_mib", "")
        print(f"{key:<18}{row['median_s']:>10}{row['mib_per_s']!s:>10}{rss!s:>14}")
    print()
    print(f"idle child RSS: {payload['idle_rss_mib']} MiB (interpreter + imports)")
    ratios = payload["ratios"]
    assert isinstance(ratios, dict)
    for name, ratio in ratios.items():
        print(f"time ratio {name}: {ratio}")
    print(f"excerpt: {payload['excerpt']}")
    verdict = "within" if payload["rss_within_target"] else "ABOVE"
    print(f"peak RSS {verdict} the {RSS_TARGET_MIB} MiB target")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="file size in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep-file", action="store_true", help="do not delete the log")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the log")
    parser.add_argument("--child", choices=("file", "generator", "idle"), help=argparse.SUPPRESS)
    parser.add_argument("--child-path", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-size", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table, write JSON when asked."""
    args = parse_args(argv)
    if args.child:
        return _child(args.child, args.child_path, args.child_size)
    size = args.size_mb * MIB
    if size <= 0 or args.rounds < 1:
        print("--size-mb and --rounds must be positive", file=sys.stderr)
        return 2
    parent = args.dir or Path(tempfile.gettempdir())
    free = shutil.disk_usage(parent).free
    if free < size + SPARE:
        print(
            f"not enough free space in {parent}: {free // MIB} MiB free, "
            f"{(size + SPARE) // MIB} MiB needed",
            file=sys.stderr,
        )
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="handrail-shape-", dir=parent))
    path = workdir / "build.log"
    try:
        start = time.perf_counter()
        write_log(path, size)
        print(f"wrote {path} ({size // MIB} MiB) in {time.perf_counter() - start:.1f} s")
        payload = measure(path, size, args.rounds)
    finally:
        if args.keep_file:
            print(f"kept {path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    _print(payload)
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
