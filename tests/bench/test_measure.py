"""bench/_measure.py, the measuring loop the overhead benchmarks share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def measure(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("_measure")


def test_every_case_is_prepared_once_then_sampled_each_round_in_rotated_order(
    measure: ModuleType,
) -> None:
    log: list[str] = []

    async def prepare(case: str) -> None:
        log.append(f"prepare {case}")

    async def sample(case: str) -> None:
        log.append(case)

    asyncio.run(measure.interleaved(["a", "b", "c"], rounds=4, prepare=prepare, sample=sample))
    assert log == [
        *("prepare a", "prepare b", "prepare c"),
        *("a", "b", "c"),
        *("b", "c", "a"),
        *("c", "a", "b"),
        *("a", "b", "c"),
    ]


def test_ratios_are_taken_within_each_round_then_their_median(measure: ModuleType) -> None:
    # Ratios 2, 4 and 1: their median is 2, where the ratio of the medians (3 / 3) is 1.
    assert measure.same_round_ratio([2.0, 40.0, 3.0], [1.0, 10.0, 3.0]) == 2.0
    with pytest.raises(ValueError, match=r"zip\(\) argument 2 is shorter"):
        measure.same_round_ratio([1.0, 2.0], [1.0])


def test_a_summary_holds_median_minimum_and_rounded_samples(measure: ModuleType) -> None:
    spread = measure.summary([3.14159, 1.23456, 2.5])
    assert (spread.median, spread.minimum) == (2.5, 1.23456)
    assert spread.rounds == [3.142, 1.235, 2.5]


def test_environment_facts_put_the_settings_between_the_machine_and_the_versions(
    measure: ModuleType,
) -> None:
    facts = measure.environment_facts({"rounds": 3}, ("handrail", "no-such-distribution"))
    assert list(facts) == ["python", "platform", "cpus", "rounds", "versions"]
    assert facts["versions"]["no-such-distribution"] == "?"


def test_a_builder_that_cannot_import_becomes_a_note(measure: ModuleType) -> None:
    def missing() -> str:
        raise ImportError("No module named 'peer'")

    async def later() -> str:
        return "async peer"

    cases, notes = asyncio.run(
        measure.available([("Sync", lambda: "sync peer"), ("Async", later), ("Gone", missing)])
    )
    assert cases == ["sync peer", "async peer"]
    assert notes == ["Gone skipped: No module named 'peer' (install the bench dependency group)"]


def test_a_table_aligns_its_columns_under_an_optional_title(measure: ModuleType) -> None:
    text = measure.table(("path", "µs"), [("long path", "1.00"), ("p", "10.00")], "Title")
    assert text.splitlines() == [
        "Title",
        "----------------",
        "path          µs",
        "----------------",
        "long path   1.00",
        "p          10.00",
        "----------------",
    ]
