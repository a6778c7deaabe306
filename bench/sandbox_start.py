"""Sandbox start overhead: `true` as a plain subprocess, through Sandbox without and with bwrap.

Every measured path runs the program `true` once per run, from one event loop, and
waits for it to end with its output read:

  subprocess        asyncio.create_subprocess_exec("true"), output piped and read
  bwrap_bare        the same, wrapped in bubblewrap with the sandbox's namespaces and
                    user switch but no workspace, limits or control groups (bubblewrap's
                    own cost)
  sandbox_plain     Sandbox.run(["true"]) without bubblewrap: workspace copy, control
                    groups, rlimits, user switch, output excerpts, cleanup
  sandbox_bwrap     Sandbox.run(["true"]) with bubblewrap: all of the above plus the
                    namespaces, mounts and setpriv

The workspace is a temporary directory of `--files` small files. Method: a warm-up and
a check per path; then K rounds of N runs per path, paths interleaved round-robin (the
order rotated every round). Reported per path: the median and minimum over rounds of
ms/run, and the median over rounds of the ratio to `subprocess` in the same round.
Nothing here asserts a time.

    .venv/bin/python bench/sandbox_start.py
    .venv/bin/python bench/sandbox_start.py --rounds 3 --runs 10 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from handrail.tools._sandbox_bwrap import UserSwitch, probe_argv
from handrail.tools.sandbox import Protection, Sandbox, SandboxConfig

Runner = Callable[[], Awaitable[None]]
BASELINE = "subprocess"


async def _subprocess(argv: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    await process.communicate()
    if process.returncode != 0:
        msg = f"{argv[0]} exited with {process.returncode}"
        raise RuntimeError(msg)


def _sandbox_runner(sandbox: Sandbox) -> Runner:
    async def run() -> None:
        result = await sandbox.run(["true"])
        if not result.succeeded:
            msg = f"sandboxed true failed: {result.exit_code} {result.stderr.text!r}"
            raise RuntimeError(msg)

    return run


async def _paths(workspace: Path, scratch: Path, notes: list[str]) -> dict[str, Runner]:
    def config(*, bwrap: bool) -> SandboxConfig:
        return SandboxConfig(workspace=workspace, use_bubblewrap=bwrap, scratch_dir=scratch)

    true = shutil.which("true") or "/bin/true"
    paths: dict[str, Runner] = {BASELINE: lambda: _subprocess([true])}
    isolated = Sandbox(config(bwrap=True))
    if Protection.NAMESPACES in await isolated.protections():
        bwrap = shutil.which("bwrap") or "bwrap"
        switch = None
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv", path="/usr/bin:/usr/sbin") or "setpriv"
            switch = UserSwitch(setpriv=setpriv, uid=65534, gid=65534)
        bare = probe_argv(bwrap, switch)
        paths["bwrap_bare"] = lambda: _subprocess(bare)
    else:
        notes.append(f"bubblewrap paths skipped: {isolated.problem}")
    paths["sandbox_plain"] = _sandbox_runner(Sandbox(config(bwrap=False)))
    if "bwrap_bare" in paths:
        paths["sandbox_bwrap"] = _sandbox_runner(isolated)
    return paths


async def _measure(args: argparse.Namespace, workspace: Path, scratch: Path) -> dict[str, object]:
    notes: list[str] = []
    paths = await _paths(workspace, scratch, notes)
    for runner in paths.values():  # warm-up, and a check that every path works
        for _ in range(args.warmup):
            await runner()
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths)
    for round_number in range(args.rounds):
        shift = round_number % len(order)
        for name in order[shift:] + order[:shift]:
            runner = paths[name]
            start = time.perf_counter()
            for _ in range(args.runs):
                await runner()
            rounds[name].append((time.perf_counter() - start) * 1000 / args.runs)
    results = {
        name: {
            "rounds_ms": [round(value, 3) for value in values],
            "median_ms": round(statistics.median(values), 3),
            "min_ms": round(min(values), 3),
        }
        for name, values in rounds.items()
    }
    baseline = rounds[BASELINE]
    ratios = {
        f"{name}_vs_{BASELINE}": round(
            statistics.median(v / b for v, b in zip(values, baseline, strict=True)), 2
        )
        for name, values in rounds.items()
        if name != BASELINE
    }
    if "sandbox_bwrap" in rounds:
        ratios["sandbox_bwrap_vs_bwrap_bare"] = round(
            statistics.median(
                v / b for v, b in zip(rounds["sandbox_bwrap"], rounds["bwrap_bare"], strict=True)
            ),
            2,
        )
    return {"results": results, "ratios": ratios, "notes": notes}


def _workspace(directory: Path, files: int) -> Path:
    workspace = directory / "workspace"
    (workspace / "src").mkdir(parents=True)
    for number in range(files):
        (workspace / "src" / f"module_{number}.py").write_text(f"VALUE = {number}\n" * 20)
    return workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="runs per path per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--files", type=int, default=10, help="files in the workspace")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="handrail-sandbox-bench-") as temporary:
        directory = Path(temporary)
        scratch = directory / "scratch"
        scratch.mkdir()
        workspace = _workspace(directory, args.files)
        measured = asyncio.run(_measure(args, workspace, scratch))
        leftovers = list(scratch.iterdir())
    payload: dict[str, object] = {
        **measured,
        "rounds": args.rounds,
        "runs_per_round": args.runs,
        "workspace_files": args.files,
        "leftover_run_directories": len(leftovers),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "euid": os.geteuid(),
    }
    results, ratios, notes = measured["results"], measured["ratios"], measured["notes"]
    assert isinstance(results, dict)
    assert isinstance(ratios, dict)
    assert isinstance(notes, list)
    print(f"{'path':16} {'median ms':>10} {'min ms':>8} {'vs subprocess':>14}")
    for name, result in results.items():
        ratio = ratios.get(f"{name}_vs_{BASELINE}", 1.0)
        print(f"{name:16} {result['median_ms']:>10.3f} {result['min_ms']:>8.3f} {ratio:>13.2f}x")
    for note in notes:
        print(f"note: {note}")
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
