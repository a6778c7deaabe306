"""Start-up cost: `import handrail` and `handrail --help` against their floors.

Every path is a fresh interpreter (`python -c ...`), started and waited for here:

  pass              python -c "pass": the interpreter alone
  pydantic          python -c "import pydantic"
  pydantic_model    pydantic plus one BaseModel class: the floor of any code using pydantic
  handrail          python -c "import handrail"
  handrail_app      from handrail import Handrail, Gate, tool: what an application imports
  typer_help        a bare two-command Typer app's --help (written here, to a temp file)
  handrail_help     the `handrail` command's --help (handrail.cli.main, as the script runs it)

Method: one warm-up per path, then K rounds, one run of each path per round, the order
rotated every round. Per path: the median (and minimum) wall time, and the medians of
the RSS at exit (VmRSS: the idle RSS the target names) and the peak (VmHWM), which the
child reads from /proc/self/status in an atexit hook (`ru_maxrss` would count the
forking parent's pages too). Ratios are medians over rounds of same-round ratios.
Then which heavy packages (drivers, Redis, HTTP clients, SDKs, SQLAlchemy, Alembic)
are in `sys.modules` after `import handrail` and after the application import.
Nothing here asserts a time; `--python` measures another checkout's interpreter
(for before/after).

    .venv/bin/python bench/startup.py
    .venv/bin/python bench/startup.py --rounds 15 --python ../base/.venv/bin/python --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("psycopg", "redis", "httpx", "openai", "anthropic", "sqlalchemy", "alembic")
"""The packages target 6 names (plus SQLAlchemy and Alembic): none may load on import."""

_BARE_TYPER = '''
import typer

app = typer.Typer(add_completion=False, help="A bare Typer app with two commands.")


@app.command()
def hello(name: str) -> None:
    """Say hello."""
    typer.echo(f"hello {name}")


@app.command()
def bye(name: str, *, loud: bool = False) -> None:
    """Say goodbye."""
    typer.echo(f"bye {name}")


app()
'''

_HELP = "import sys\nfrom handrail.cli import main\nsys.argv = ['handrail', '--help']\nmain()"

_PROBE = (
    "import atexit, sys\n"
    "def _rss():\n"
    "    with open('/proc/self/status') as f:\n"
    "        kb = dict(l.split(':', 1) for l in f if l.startswith(('VmRSS', 'VmHWM')))\n"
    "    sys.stderr.write(f\"@@rss {kb['VmRSS'].split()[0]} {kb['VmHWM'].split()[0]}\\n\")\n"
    "atexit.register(_rss)\n"
    "del _rss\n"
)
"""Prepended to every path: report the RSS at exit and its peak, in kB, on stderr."""

_RATIOS = (
    ("handrail", "pass"),
    ("handrail", "pydantic"),
    ("handrail_app", "pydantic_model"),
    ("handrail_help", "typer_help"),
)


def _paths(python: str, bare: Path) -> dict[str, list[str]]:
    run_bare = f"sys.argv = [{str(bare)!r}, '--help']\nimport runpy\nrunpy.run_path(sys.argv[0])"
    statements = {
        "pass": "pass",
        "pydantic": "import pydantic",
        "pydantic_model": "import pydantic\nclass M(pydantic.BaseModel):\n    x: int",
        "handrail": "import handrail",
        "handrail_app": "from handrail import Handrail, Gate, tool",
        "typer_help": run_bare,
        "handrail_help": _HELP,
    }
    return {name: [python, "-c", _PROBE + text] for name, text in statements.items()}


def _run(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, RSS at exit and peak RSS in MB of one run; a failing run is an error."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)  # noqa: S603
    wall = time.perf_counter() - started
    errors = done.stderr.decode(errors="replace")
    probe = [line for line in errors.splitlines() if line.startswith("@@rss ")]
    if done.returncode != 0 or not probe:
        raise RuntimeError(f"{argv[-1][-80:]!r} exited {done.returncode}: {errors[-500:]}")
    rss_kb, peak_kb = probe[-1].split()[1:]
    return wall, int(rss_kb) / 1024, int(peak_kb) / 1024


def _loaded(python: str, statement: str) -> list[str]:
    """Which of HEAVY are in sys.modules after `statement`, in a fresh interpreter."""
    script = (
        f"import sys\n{statement}\n"
        f"print(' '.join(n for n in {HEAVY!r} if n in {{m.split('.')[0] for m in sys.modules}}))"
    )
    done = subprocess.run(  # noqa: S603 - the interpreter under test, a fixed script
        [python, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.split()


def measure(python: str, rounds: int) -> dict[str, object]:
    """Time every path in rotated rounds; the medians, ratios and loaded packages."""
    with tempfile.TemporaryDirectory() as folder:
        bare = Path(folder) / "bare_typer.py"
        bare.write_text(_BARE_TYPER, encoding="utf-8")
        paths = _paths(python, bare)
        names = list(paths)
        walls: dict[str, list[float]] = {name: [] for name in names}
        rss: dict[str, list[float]] = {name: [] for name in names}
        peak: dict[str, list[float]] = {name: [] for name in names}
        for name in names:  # warm-up: the page cache and .pyc files
            _run(paths[name])
        for index in range(rounds):
            shift = index % len(names)
            for name in [*names[shift:], *names[:shift]]:
                wall, at_exit, highest = _run(paths[name])
                walls[name].append(wall)
                rss[name].append(at_exit)
                peak[name].append(highest)
    results = {
        name: {
            "wall_ms_median": statistics.median(walls[name]) * 1000,
            "wall_ms_min": min(walls[name]) * 1000,
            "rss_mb_median": statistics.median(rss[name]),
            "peak_rss_mb_median": statistics.median(peak[name]),
            "rounds_ms": [w * 1000 for w in walls[name]],
        }
        for name in names
    }
    ratios = {
        f"{a}_vs_{b}": {
            "wall": statistics.median(x / y for x, y in zip(walls[a], walls[b], strict=True)),
            "rss": statistics.median(x / y for x, y in zip(rss[a], rss[b], strict=True)),
        }
        for a, b in _RATIOS
    }
    return {
        "python": python,
        "rounds": rounds,
        "results": results,
        "ratios": ratios,
        "loaded_after_import_handrail": _loaded(python, "import handrail"),
        "loaded_after_app_import": _loaded(python, "from handrail import Handrail, Gate, tool"),
    }


def report(payload: dict[str, object]) -> str:
    """The results as a plain-text table."""
    results = payload["results"]
    ratios = payload["ratios"]
    assert isinstance(results, dict)
    assert isinstance(ratios, dict)
    lines = [
        f"python {payload['python']}, {payload['rounds']} rounds",
        f"{'path':<16} {'wall ms (median)':>17} {'wall ms (min)':>14} {'RSS MB':>8} {'peak MB':>8}",
    ]
    for name, row in results.items():
        lines.append(
            f"{name:<16} {row['wall_ms_median']:>17.1f} {row['wall_ms_min']:>14.1f} "
            f"{row['rss_mb_median']:>8.1f} {row['peak_rss_mb_median']:>8.1f}"
        )
    lines.append("same-round ratios (median): wall, RSS")
    for name, ratio in ratios.items():
        lines.append(f"  {name:<36} {ratio['wall']:>6.2f}x {ratio['rss']:>6.2f}x")
    lines.append(f"after import handrail:  {payload['loaded_after_import_handrail'] or 'none'}")
    lines.append(f"after the app import:   {payload['loaded_after_app_import'] or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table, and write JSON when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--python", default=sys.executable, help="The interpreter to measure.")
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args(argv)
    payload = measure(args.python, args.rounds)
    print(report(payload))
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
