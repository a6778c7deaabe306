"""`handrail eval compare`: what changed between two runs, and what regressed.

Every metric of the totals and of each scenario both runs have is set side by side
(before, after, delta). A change regresses when it goes the way `METRICS` calls worse
by more than the tolerance: for a rate an absolute difference (0.02 is two points),
for a count, duration or number of tokens a fraction of the earlier value (0.02 is
2%). A scenario whose expectations held before and fail now regresses too. A value
measured in only one run, a scenario in only one run and a metric the catalogue does
not know are shown but never judged. Never reruns anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rich.console import Group
from rich.table import Table
from rich.text import Text

from handrail.errors import ConfigurationError
from handrail.eval._format import amount_text, info, measured, value_text
from handrail.eval.report import EvalReport, Metric
from handrail.text import shown

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["TOTAL", "Change", "Comparison", "compare_reports", "render_comparison"]

TOTAL: Final = "total"
"""The scope of a change in the totals (scenarios are named by their names)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One metric in one scope, before and after."""

    scope: str
    metric: str
    before: Metric | None
    after: Metric | None
    regressed: bool

    @property
    def delta(self) -> float | None:
        """The value after less the value before, when both were measured."""
        if self.before is None or self.after is None:
            return None
        if self.before.value is None or self.after.value is None:
            return None
        return self.after.value - self.before.value

    @property
    def changed(self) -> bool:
        """Whether the value (or whether it was measured at all) differs."""
        before = None if self.before is None else self.before.value
        after = None if self.after is None else self.after.value
        return before != after


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """Two runs of one suite side by side."""

    before: EvalReport
    after: EvalReport
    tolerance: float
    changes: tuple[Change, ...]
    newly_failed: tuple[str, ...]
    """Scenarios whose expectations held before and fail now."""
    newly_passed: tuple[str, ...]
    only_before: tuple[str, ...]
    only_after: tuple[str, ...]

    @property
    def regressions(self) -> tuple[Change, ...]:
        """The changes that went the worse way by more than the tolerance."""
        return tuple(change for change in self.changes if change.regressed)

    @property
    def regressed(self) -> bool:
        """Whether anything regressed: a metric, or a scenario that now fails."""
        return bool(self.regressions or self.newly_failed)


def _worse(name: str, before: Metric | None, after: Metric | None, tolerance: float) -> bool:
    found = info(name)
    if found is None or before is None or after is None:
        return False
    if before.value is None or after.value is None:
        return False
    allowed = tolerance if found.kind == "rate" else tolerance * abs(before.value)
    if found.better == "higher":
        return after.value < before.value - allowed
    return after.value > before.value + allowed


def _scope(
    scope: str,
    before: Sequence[Metric],
    after: Sequence[Metric],
    names: Sequence[str],
    tolerance: float,
) -> Iterator[Change]:
    old = {m.name: m for m in before}
    new = {m.name: m for m in after}
    for name in names:
        if name in old or name in new:
            yield Change(
                scope=scope,
                metric=name,
                before=old.get(name),
                after=new.get(name),
                regressed=_worse(name, old.get(name), new.get(name), tolerance),
            )


def compare_reports(before: EvalReport, after: EvalReport, *, tolerance: float = 0.0) -> Comparison:
    """Compare two reports of the same suite (ConfigurationError for two suites)."""
    if before.suite != after.suite:
        raise ConfigurationError(
            f"the reports are of different suites ({before.suite!r} and {after.suite!r})"
        )
    if not tolerance >= 0:
        raise ConfigurationError("the tolerance cannot be negative")
    names = measured([before, after])
    changes = list(_scope(TOTAL, before.totals, after.totals, names, tolerance))
    earlier = {s.name: s for s in before.scenarios}
    later = {s.name: s for s in after.scenarios}
    common = [name for name in earlier if name in later]
    for name in common:
        changes.extend(_scope(name, earlier[name].metrics, later[name].metrics, names, tolerance))
    return Comparison(
        before=before,
        after=after,
        tolerance=tolerance,
        changes=tuple(changes),
        newly_failed=tuple(n for n in common if earlier[n].passed and not later[n].passed),
        newly_passed=tuple(n for n in common if not earlier[n].passed and later[n].passed),
        only_before=tuple(n for n in earlier if n not in later),
        only_after=tuple(n for n in later if n not in earlier),
    )


def _delta_text(change: Change) -> Text:
    delta = change.delta
    if delta is None:
        return Text("")
    found = info(change.metric)
    if found is not None and found.kind == "rate":
        text = f"{delta * 100:+.1f} pt"
    else:
        text = f"{'+' if delta >= 0 else '-'}{amount_text(change.metric, abs(delta))}"
    return Text(text, style="bold red" if change.regressed else "")


def render_comparison(comparison: Comparison, *, everything: bool = False) -> RenderableType:
    """A table of the changes (every metric with `everything`), regressions marked."""
    before, after = comparison.before, comparison.after
    heading = Text()
    heading.append(shown(before.suite), style="bold")
    heading.append(f": {shown(before.model)} ({before.started_at.isoformat(timespec='seconds')})")
    heading.append(f" → {shown(after.model)} ({after.started_at.isoformat(timespec='seconds')})")
    table = Table(title="Changes", title_justify="left")
    for column in ("scope", "metric", "before", "after", "delta", ""):
        table.add_column(column, overflow="fold")
    for change in comparison.changes:
        if not (everything or change.changed):
            continue
        table.add_row(
            Text(shown(change.scope)),
            Text(shown(change.metric)),
            Text(value_text(change.before) or "not measured"),
            Text(value_text(change.after) or "not measured"),
            _delta_text(change),
            Text("REGRESSED", style="bold red") if change.regressed else Text(""),
        )
    lines: list[Text | Table] = [heading, table]
    for label, names, style in (
        ("now failing", comparison.newly_failed, "bold red"),
        ("now passing", comparison.newly_passed, "green"),
        ("only in the first run", comparison.only_before, "yellow"),
        ("only in the second run", comparison.only_after, "yellow"),
    ):
        if names:
            lines.append(Text(shown(f"{label}: {', '.join(names)}"), style=style))
    count = len(comparison.regressions) + len(comparison.newly_failed)
    verdict = (
        Text(f"{count} regression(s)", style="bold red")
        if comparison.regressed
        else Text("no regression", style="green")
    )
    lines.append(verdict)
    return Group(*lines)
