"""search_text against raw `rg --json` on the same large tree (target: at most 1.15x).

A tree of text files is generated (by default 20,000 files of 10 kB, about 200 MB, in
a temporary directory; or `--tree DIR` searches an existing one). Two fixed-string
searches are measured there: one with a few matches, one with many (max_results is
reached). A third, "mid", is the issue's case below `count_limit`: about 1,000 matches
over a tree of its own of 1,000 such files (`--mid-files`), one parallel pass sorted
here. `--cases mid` measures that one only.
Paths per search, interleaved round-robin with their order rotated every round:

    raw       subprocess.run([rg, "--json", "-F", "-e", PATTERN, "."]), all output read
    same_argv subprocess.run(TextSearch.command(PATTERN)): raw rg with Handrail's flags
              (smart case, ignore files without git, ...), all output read
    tool      await TextSearch.search(PATTERN): the tool function, no gate; ripgrep
              confined as by default (Landlock where the kernel has version 6 or
              later, started by a restricted thread; else bubblewrap)
    bwrap     the same with SearchConfig(confinement="bubblewrap"): ripgrep in a mount
              namespace where only the workspace exists (omitted without bwrap)
    unconfined  the same with SearchConfig(confine=False): what confinement costs
    gate      await gate.handle(call) and envelope.to_json(): the full Handrail path

Reported: the median and minimum wall time per path, and the ratios of the medians to
raw. With many matches Handrail stops ripgrep once it has its page (and a count) while
raw rg writes every match, so that ratio is below 1. Nothing here asserts a time.

    .venv/bin/python bench/search_text.py
    .venv/bin/python bench/search_text.py --files 2000 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handrail import Gate, Principal, Registry, Status, ToolCall
from handrail.testing import MemoryAuditSink
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import SearchConfig, TextSearch, search_tools

FEW = "needle_rare_token"
MANY = "common_token"
MID = "medium_token"
RARE_EVERY = 4000
COMMON_EVERY = 50
MID_EVERY = 157
MID_FILES = 1000
CASES = ("few", "many", "mid")
PATHS = ("raw", "same_argv", "tool", "bwrap", "unconfined", "gate")
TARGET = 1.15


@dataclass(kw_only=True)
class Case:
    """One search measured along every path."""

    name: str
    pattern: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in _paths()})
    check: dict[str, Any] = field(default_factory=dict)


def _paths() -> tuple[str, ...]:
    """The paths measured here: the bubblewrap one only where bwrap is installed."""
    if shutil.which("bwrap") is None:
        return tuple(path for path in PATHS if path != "bwrap")
    return PATHS


def generate(root: Path, files: int, file_bytes: int) -> int:
    """Write `files` text files of about `file_bytes` each; returns the bytes written."""
    rng = random.Random(7)  # noqa: S311 - reproducible text, not secrecy
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(5000)
    ]
    lines = []
    for n in range(6000):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        if n % COMMON_EVERY == 0:
            line += f" {MANY}"
        if n % MID_EVERY == MID_EVERY // 2:
            line += f" {MID}"
        lines.append(line + "\n")
    blob = "".join(lines)
    written = 0
    for i in range(files):
        directory = root / f"d{i // 200:03d}" / f"s{(i // 20) % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        start = (i * 7919) % (len(blob) - file_bytes)
        cut = blob.rfind("\n", start, start + file_bytes) + 1 or start + file_bytes
        text = blob[start:cut]
        if i % RARE_EVERY == RARE_EVERY // 2:
            text += f"here is the {FEW}\n"
        (directory / f"f{i:05d}.txt").write_text(text)
        written += len(text)
    return written


async def measure(
    args: argparse.Namespace,
    tree: Path,
    rg: str,
    cases: list[Case],
) -> list[Case]:
    config = SearchConfig(rg=rg)
    workspace = Workspace(tree)
    searcher = TextSearch(workspace, config)
    unconfined = TextSearch(workspace, SearchConfig(rg=rg, confine=False))
    by_bwrap = (
        TextSearch(workspace, SearchConfig(rg=rg, confinement="bubblewrap"))
        if "bwrap" in _paths()
        else None
    )
    registry = Registry()
    for item in search_tools(workspace, config):
        registry.register(item)
    gate = Gate(registry, audit=MemoryAuditSink())
    principal = Principal(user_id="bench", tenant_id="t1")

    def raw(command: list[str]) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            # Blocking on purpose: the baseline is plain rg, with nothing else running.
            done = subprocess.run(  # noqa: S603, ASYNC221 - a fixed argument vector
                command,
                cwd=tree,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            return len(done.stdout)

        return run

    def tool(pattern: str, search: TextSearch = searcher) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            return await search.search(pattern)

        return run

    def through_gate(pattern: str) -> Callable[[], Awaitable[object]]:
        arguments = json.dumps({"pattern": pattern})

        async def run() -> object:
            call = ToolCall(id="call_1", name="workspace.search_text", arguments=arguments)
            envelope = await gate.handle(call, principal)
            assert envelope.status is not Status.ERROR, envelope.summary
            return envelope.to_json()

        return run

    for case in cases:
        result = await searcher.search(case.pattern)
        case.check = {
            "returned": len(result.matches),
            "total_matches": result.total_matches,
            "complete": result.complete,
            "truncated": result.truncated,
            "rg_elapsed_ms": result.elapsed_ms,
        }
    runs = {
        case.name: {
            "raw": raw([rg, "--json", "-F", "-e", case.pattern, "."]),
            "same_argv": raw(searcher.command(case.pattern)),
            "tool": tool(case.pattern),
            "unconfined": tool(case.pattern, unconfined),
            **({"bwrap": tool(case.pattern, by_bwrap)} if by_bwrap is not None else {}),
            "gate": through_gate(case.pattern),
        }
        for case in cases
    }
    for round_no in range(args.warmup + args.rounds):
        for case in cases:
            paths = _paths()
            order = paths[round_no % len(paths) :] + paths[: round_no % len(paths)]
            for path in order:
                started = time.perf_counter()
                await runs[case.name][path]()
                elapsed = (time.perf_counter() - started) * 1000
                if round_no >= args.warmup:
                    case.samples[path].append(elapsed)
    return cases


def summarize(cases: list[Case]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for case in cases:
        raw = statistics.median(case.samples["raw"])
        same = statistics.median(case.samples["same_argv"])
        paths = {}
        for path in _paths():
            samples = case.samples[path]
            ratios = [a / b for a, b in zip(samples, case.samples["raw"], strict=True)]
            paths[path] = {
                "median_ms": round(statistics.median(samples), 2),
                "min_ms": round(min(samples), 2),
                "ratio_of_medians": round(statistics.median(samples) / raw, 3),
                "median_round_ratio": round(statistics.median(ratios), 3),
                "ratio_vs_same_argv": round(statistics.median(samples) / same, 3),
                "rounds_ms": [round(s, 2) for s in samples],
            }
        out[case.name] = {"pattern": case.pattern, "check": case.check, "paths": paths}
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--file-bytes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--tree", type=Path, help="search this directory instead of a generated one"
    )
    parser.add_argument("--few", default=FEW, help="the pattern with few matches")
    parser.add_argument("--many", default=MANY, help="the pattern with many matches")
    parser.add_argument("--mid", default=MID, help="the pattern of the mid case")
    parser.add_argument("--mid-files", type=int, default=MID_FILES)
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated, of {', '.join(CASES)}",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Generate (or take) the tree, measure, print the table, write JSON when asked."""
    args = parse_args(argv)
    rg = shutil.which("rg")
    if rg is None:
        print("ripgrep (rg) is not installed", file=sys.stderr)
        return 2
    version = subprocess.run(  # noqa: S603 - a fixed argument vector
        [rg, "--version"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()[0]
    chosen = {name.strip() for name in args.cases.split(",") if name.strip()}
    if not chosen <= set(CASES):
        print(f"--cases: choose among {', '.join(CASES)}", file=sys.stderr)
        return 2
    cases: list[Case] = []
    described = []
    with tempfile.TemporaryDirectory(prefix="handrail-search-bench-") as scratch:
        big = [
            Case(name=f"{name} matches", pattern=pattern)
            for name, pattern in (("few", args.few), ("many", args.many))
            if name in chosen
        ]
        if big:
            if args.tree is None:
                tree = Path(scratch) / "big"
                size = generate(tree, args.files, args.file_bytes)
                described.append(f"{args.files} generated files, {size / 1e6:.0f} MB")
            else:
                tree = args.tree.resolve()
                described.append(str(tree))
            cases += asyncio.run(measure(args, tree, rg, big))
        if "mid" in chosen:
            tree = Path(scratch) / "mid"
            size = generate(tree, args.mid_files, args.file_bytes)
            described.append(f"mid: {args.mid_files} generated files, {size / 1e6:.1f} MB")
            mid = [Case(name="mid matches", pattern=args.mid)]
            cases += asyncio.run(measure(args, tree, rg, mid))
    results = summarize(cases)
    probe = TextSearch(Workspace(Path(tempfile.gettempdir())), SearchConfig(rg=rg))
    print(
        f"search_text vs raw rg --json: {'; '.join(described)}; {args.rounds} rounds,"
        f" paths interleaved; tool confined by {probe.confined_by};"
        f" {version}; Python {platform.python_version()}, {os.cpu_count()} CPUs.",
    )
    findings = []
    for name, result in results.items():
        print(f"\n{name} (pattern {result['pattern']!r}; {result['check']})")
        print(
            f"  {'path':10} {'median ms':>10} {'min ms':>8} {'x raw':>7} {'x raw/round':>12}"
            f" {'x same_argv':>12}",
        )
        for path, row in result["paths"].items():
            print(
                f"  {path:10} {row['median_ms']:>10.2f} {row['min_ms']:>8.2f}"
                f" {row['ratio_of_medians']:>7.3f} {row['median_round_ratio']:>12.3f}"
                f" {row['ratio_vs_same_argv']:>12.3f}",
            )
        for path in ("tool", "gate"):
            row = result["paths"][path]
            ratio = row["ratio_of_medians"]
            verdict = "meets" if ratio <= TARGET else "misses"
            findings.append(
                f"{name}, {path}: {ratio:.3f}x raw rg ({verdict} the {TARGET}x target);"
                f" {row['ratio_vs_same_argv']:.3f}x rg with the same arguments",
            )
    print()
    for line in findings:
        print(line)
    if args.json:
        payload = {
            "environment": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "rg": version,
                "tree": "; ".join(described),
                "rounds": args.rounds,
                "confined_by": probe.confined_by,
            },
            "results": results,
            "findings": findings,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
