from __future__ import annotations

import json
from pathlib import Path

import pytest

from _skill_folders import EXAMPLES, write_skill
from handrail.errors import ConfigurationError
from handrail.skills import SkillLibrary, SkillSelector
from handrail.testing import MemoryAuditSink


@pytest.fixture
def selector() -> SkillSelector:
    return SkillSelector(SkillLibrary.load(EXAMPLES))


@pytest.mark.parametrize(
    ("goal", "chosen"),
    [
        ("What is the status of my order ord-12?", ("order-support",)),
        ("帮我查一下订单", ("order-support",)),
        ("库存还剩多少", ("inventory-report",)),
        ("Which books should we REORDER? A stock report, please.", ("inventory-report",)),
        ("Draft the changelog for 2.0", ("release-notes",)),
        ("Tell me a joke", ()),
        ("", ()),
    ],
)
def test_a_goal_selects_the_skills_its_words_call_for(
    selector: SkillSelector,
    goal: str,
    chosen: tuple[str, ...],
) -> None:
    assert selector.select(goal, k=3) == chosen


def test_triggers_match_whole_words_only(selector: SkillSelector) -> None:
    assert selector.scores("the border was closed")["order-support"] == 0
    assert selector.scores("an order")["order-support"] == 4 + 2 + 1  # trigger, name, description


def test_at_most_k_are_chosen_best_first_ties_by_name(tmp_path: Path) -> None:
    for name in ("beta", "alpha", "gamma"):
        write_skill(tmp_path, name, front=f"name: {name}\ndescription: d\ntriggers: [deploy]")
    write_skill(
        tmp_path,
        "delta",
        front="name: delta\ndescription: d\ntriggers: [deploy, rollback]",
    )
    selector = SkillSelector(SkillLibrary.load(tmp_path))
    goal = "deploy then rollback"
    assert selector.select(goal, k=2) == ("delta", "alpha")
    assert selector.select(goal, k=10) == ("delta", "alpha", "beta", "gamma")
    assert selector.select(goal, k=0) == ()
    assert selector.select(goal, k=2) == selector.select(goal, k=2)


def test_names_and_descriptions_count_without_triggers(tmp_path: Path) -> None:
    write_skill(tmp_path, "pdf-forms", front="name: pdf-forms\ndescription: Fill in PDF forms.")
    selector = SkillSelector(SkillLibrary.load(tmp_path))
    assert selector.scores("the forms") == {"pdf-forms": 3}  # name word 2, description word 1
    assert selector.select("the forms", k=1) == ("pdf-forms",)
    assert selector.select("fill it in", k=1) == ()  # one description word is not enough
    assert SkillSelector(SkillLibrary.load(tmp_path), min_score=1).select("fill", k=1) == (
        "pdf-forms",
    )


def test_a_huge_goal_is_read_only_in_part(selector: SkillSelector) -> None:
    assert selector.select("x " * 20_000 + "order", k=1) == ()
    assert selector.select("order " + "x " * 20_000, k=1) == ("order-support",)


def test_what_the_selector_offers_is_audited() -> None:
    sink = MemoryAuditSink()
    selector = SkillSelector(SkillLibrary.load(EXAMPLES), audit=sink)
    assert selector.select("reorder stock for the order", k=2) == (
        "order-support",
        "inventory-report",
    )
    assert selector.select("nothing here", k=2) == ()
    [event] = sink.events
    assert (event.kind, event.stage, event.decision) == ("skill", "offered", "selector")
    assert json.loads(event.detail or "") == {"skills": ["inventory-report", "order-support"]}
    assert event.tool is None


def test_bad_settings_are_refused(selector: SkillSelector) -> None:
    with pytest.raises(ConfigurationError):
        selector.select("order", k=-1)
    with pytest.raises(ConfigurationError):
        SkillSelector(SkillLibrary.load(EXAMPLES), min_score=0)
