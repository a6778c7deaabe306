"""Cost of one PolicyEngine decision as the number of rules grows, against a dict lookup.

Each case decides the same call (`bench.target`, arguments {"n": 1}) with an engine
of 1, 100 or 10,000 rules, most of them about other tools; rules are indexed by tool,
so the cost should not grow with rules that do not apply. The worst cases put many
rules on the decided tool itself, with the deciding rule tried last. Cases run
interleaved, round after round; the ratios are medians of same-round ratios to a
bare dict lookup (and to `AllowAll`, the cost of any async `decide` at all).

Run: .venv/bin/python bench/policy_decision.py [--rounds 15] [--calls 20000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from handrail import Principal, SideEffect
from handrail.authz.policy import AllowAll, Facts, Outcome, PolicyEngine, Rule

TARGET = "bench.target"
PRINCIPAL = Principal(user_id="u", tenant_id="t", permissions=frozenset({"p"}))
ARGUMENTS = {"n": 1}
CONTEXT = {"side_effect": SideEffect.NONE}
BASELINE = "dict"
ALLOW_ALL = "allow_all"


def _never(facts: Facts) -> bool:
    return facts.arguments["n"] < 0


def _holds(facts: Facts) -> bool:
    return facts.arguments["n"] >= 0


def _rule(name: str, tool: str, *, when: Callable[[Facts], bool]) -> Rule:
    return Rule(name=name, tool=tool, outcome=Outcome.CONFIRM, reason="bench", when=when)


def engine(*, others: int, applying: int, patterns: bool = False) -> PolicyEngine:
    """`others` rules about other tools; `applying` rules about TARGET, only the last holding.

    With `patterns`, the other rules are patterns (`other42.*`) instead of tool names.
    """
    rules = [
        _rule(f"other-{i}", f"other{i}.*" if patterns else f"other.t{i}", when=_holds)
        for i in range(others)
    ]
    rules += [_rule(f"miss-{i}", TARGET, when=_never) for i in range(applying - 1)]
    rules.append(_rule("decides", TARGET, when=_holds))
    return PolicyEngine(rules)


@dataclass(kw_only=True)
class Case:
    """One measured path: what it is, how many rules, and its per-call samples (ns)."""

    key: str
    label: str
    rules: int
    applying: int
    run: Callable[[int], Awaitable[int]]
    policy: PolicyEngine | None = None
    samples: list[float] = field(default_factory=list)


def _decide_case(key: str, label: str, policy: PolicyEngine | AllowAll, applying: int) -> Case:
    rules = len(policy.rules) if isinstance(policy, PolicyEngine) else 0

    async def run(calls: int) -> int:
        decide = policy.decide
        start = time.perf_counter_ns()
        for _ in range(calls):
            await decide(PRINCIPAL, TARGET, ARGUMENTS, CONTEXT)
        return time.perf_counter_ns() - start

    engine_ = policy if isinstance(policy, PolicyEngine) else None
    return Case(key=key, label=label, rules=rules, applying=applying, run=run, policy=engine_)


def _baseline_case() -> Case:
    table = {f"other.t{i}": i for i in range(10_000)} | {TARGET: -1}

    async def run(calls: int) -> int:
        start = time.perf_counter_ns()
        for _ in range(calls):
            # The subscript runs (Python keeps expression statements); it is what is measured.
            table[TARGET]
        return time.perf_counter_ns() - start

    return Case(key=BASELINE, label="dict lookup (baseline)", rules=0, applying=0, run=run)


def cases() -> list[Case]:
    """Every measured path, baseline first."""
    engines = [
        ("rules_1", "1 rule, 1 for the tool", engine(others=0, applying=1), 1),
        ("rules_100", "100 rules, 1 for the tool", engine(others=99, applying=1), 1),
        ("rules_10000", "10,000 rules, 1 for the tool", engine(others=9_999, applying=1), 1),
        (
            "patterns_10000",
            "10,000 pattern rules, 1 for the tool",
            engine(others=9_999, applying=1, patterns=True),
            1,
        ),
        ("worst_100", "100 rules, all for the tool", engine(others=0, applying=100), 100),
        (
            "worst_10000",
            "10,000 rules, 100 for the tool",
            engine(others=9_900, applying=100),
            100,
        ),
    ]
    return [
        _baseline_case(),
        _decide_case(ALLOW_ALL, "AllowAll.decide (any async decide)", AllowAll(), 0),
        *(_decide_case(key, label, built, n) for key, label, built, n in engines),
    ]


async def check(case: Case) -> None:
    """An engine case must decide by the one rule that holds, however many it holds."""
    if case.policy is None:
        return
    decision = await case.policy.decide(PRINCIPAL, TARGET, ARGUMENTS, CONTEXT)
    assert decision.rule == "decides", (case.key, decision)


async def measure(all_cases: list[Case], *, rounds: int, calls: int) -> None:
    """Warm up, then `rounds` interleaved rounds of `calls` decisions per case."""
    for case in all_cases:
        await check(case)
        await case.run(min(calls, 1_000))
    for index in range(rounds):
        shift = index % len(all_cases)
        for case in all_cases[shift:] + all_cases[:shift]:
            gc.collect()
            case.samples.append(await case.run(calls) / calls)


@dataclass(frozen=True, kw_only=True)
class Stats:
    """Summary of one case."""

    key: str
    label: str
    rules: int
    applying: int
    median_ns: float
    min_ns: float
    vs_dict: float
    vs_allow_all: float


def summarize(all_cases: list[Case]) -> list[Stats]:
    """Medians and same-round ratios to the dict lookup and to AllowAll."""
    by_key = {case.key: case for case in all_cases}

    def paired(samples: list[float], reference: list[float]) -> float:
        return statistics.median(a / b for a, b in zip(samples, reference, strict=True))

    return [
        Stats(
            key=case.key,
            label=case.label,
            rules=case.rules,
            applying=case.applying,
            median_ns=statistics.median(case.samples),
            min_ns=min(case.samples),
            vs_dict=paired(case.samples, by_key[BASELINE].samples),
            vs_allow_all=paired(case.samples, by_key[ALLOW_ALL].samples),
        )
        for case in all_cases
    ]


def table(stats: list[Stats]) -> str:
    """The results as a fixed-width table."""
    header = ("case", "rules", "for tool", "median ns", "min ns", "x dict", "x AllowAll")
    body = [
        (
            s.label,
            str(s.rules),
            str(s.applying),
            f"{s.median_ns:.0f}",
            f"{s.min_ns:.0f}",
            f"{s.vs_dict:.1f}",
            f"{s.vs_allow_all:.2f}",
        )
        for s in stats
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "-" * len(line(header))
    return "\n".join([rule, line(header), rule, *(line(row) for row in body), rule])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per case (default 15)")
    parser.add_argument("--calls", type=int, default=20_000, help="decisions per round")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, and write JSON when asked."""
    args = parse_args(argv)
    all_cases = cases()
    stats = asyncio.run(_run(all_cases, args))
    print(
        f"PolicyEngine.decide per call; {args.rounds} rounds x {args.calls} calls per case, "
        f"interleaved; Python {sys.version.split()[0]} on {platform.machine()}.",
    )
    print(table(stats))
    if args.json:
        payload = {
            s.key: {
                "label": s.label,
                "rules": s.rules,
                "rules_for_tool": s.applying,
                "median_ns": round(s.median_ns, 1),
                "min_ns": round(s.min_ns, 1),
                "ratio_vs_dict": round(s.vs_dict, 3),
                "ratio_vs_allow_all": round(s.vs_allow_all, 3),
            }
            for s in stats
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


async def _run(all_cases: list[Case], args: argparse.Namespace) -> list[Stats]:
    await measure(all_cases, rounds=args.rounds, calls=args.calls)
    return summarize(all_cases)


if __name__ == "__main__":
    sys.exit(main())
