"""The measuring loop the overhead benchmarks share: interleaved rounds, timing, statistics.

Owns how paths are prepared (checked, warmed up) and then timed in rounds whose order
rotates, the medians, minima and same-round ratios, the environment facts, the tables.
Never decides what a path does or what its numbers mean.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

C = TypeVar("C")
P = ParamSpec("P")

__all__ = [
    "Summary",
    "available",
    "elapsed_ns",
    "environment_facts",
    "interleaved",
    "same_round_ratio",
    "summary",
    "table",
    "version",
]


# --- measuring --------------------------------------------------------------------------------


async def interleaved(
    cases: Sequence[C],
    *,
    rounds: int,
    prepare: Callable[[C], Awaitable[None]],
    sample: Callable[[C], Awaitable[None]],
) -> None:
    """Prepare every case once, then take `rounds` rounds of one `sample` per case.

    The cases run round-robin, their order rotated by one every round, so that machine
    noise lands on all of them alike; a full garbage collection precedes each sample.
    """
    for case in cases:
        await prepare(case)
    for index in range(rounds):
        shift = index % len(cases)
        for case in [*cases[shift:], *cases[:shift]]:
            gc.collect()
            await sample(case)


async def elapsed_ns(
    work: Callable[P, Awaitable[object]], *args: P.args, **kwargs: P.kwargs
) -> int:
    """Nanoseconds that `await work(*args, **kwargs)` took."""
    start = time.perf_counter_ns()
    await work(*args, **kwargs)
    return time.perf_counter_ns() - start


# --- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    """The median and minimum of one path's samples (one per round), and the samples."""

    median: float
    minimum: float
    rounds: list[float]
    """The samples rounded to three places, in round order."""


def summary(samples: Sequence[float]) -> Summary:
    """Median, minimum and rounded samples of one path."""
    return Summary(
        median=statistics.median(samples),
        minimum=min(samples),
        rounds=[round(sample, 3) for sample in samples],
    )


def same_round_ratio(samples: Sequence[float], reference: Sequence[float]) -> float:
    """The median over rounds of `samples / reference` measured in the same round."""
    return statistics.median(a / b for a, b in zip(samples, reference, strict=True))


# --- environment and peers --------------------------------------------------------------------


def version(distribution: str) -> str:
    """The installed version of a distribution, or "?"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def environment_facts(
    settings: dict[str, object], distributions: Iterable[str]
) -> dict[str, object]:
    """What the numbers were measured on: interpreter, platform, CPUs, the run's settings
    and the versions of `distributions`."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        **settings,
        "versions": {name: version(name) for name in distributions},
    }


async def available(
    builders: Iterable[tuple[str, Callable[[], C | Awaitable[C]]]],
) -> tuple[list[C], list[str]]:
    """Every case whose builder imports; the others are named in the notes, not measured."""
    cases: list[C] = []
    notes: list[str] = []
    for name, build in builders:
        try:
            made = build()
            cases.append(await made if isinstance(made, Awaitable) else made)
        except ImportError as exc:
            notes.append(f"{name} skipped: {exc} (install the bench dependency group)")
    return cases, notes


# --- reporting --------------------------------------------------------------------------------


def table(header: tuple[str, ...], body: list[tuple[str, ...]], title: str | None = None) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "-" * len(line(header))
    top = [] if title is None else [title]
    return "\n".join([*top, rule, line(header), rule, *(line(r) for r in body), rule])
