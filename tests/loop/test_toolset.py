"""The run's toolset changes step by step: searches add tools, skills narrow them.

A scripted model searches, and the next step's definitions, rendered in each
adapter's format, hold the found tool; the discovery survives suspend and resume and a
replay derives it again; a skill narrows the exposure and never widens it; the host's
selector starts a run with its skills. Stand-ins answer as `search_tools` and
`load_skill` do (`_toolset_tools`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _agent_worker import ALICE, TICKET_ARGS, World, answer, call, reply, world

from _toolset_tools import (
    SKILL_TEXT,
    Catalogue,
    SkillSelector,
    library,
    names_of,
    register_catalogue,
)
from handrail import ToolCall
from handrail.adapters import DefinitionFormat, tool_definitions
from handrail.errors import ConfigurationError
from handrail.loop._agent_record import ToolsetChange
from handrail.loop._run_log import read_run
from handrail.loop._toolset import META_TOOLS, ToolsetOptions, active_skills, discovered
from handrail.loop.agent import AgentLoop, RunData, RunStatus
from handrail.loop.models import ModelClient, ScriptedModelClient
from handrail.shaping.marking import read_block
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

CORE = {"asset_status", "create_ticket", "note_ticket", "search_tools", "load_skill", "shown_tool"}


@pytest.fixture
def catalogue() -> Catalogue:
    return Catalogue(found={"billing": ["billing_lookup"]}, claims={"billing": ["asset_status"]})


@pytest.fixture
def made(tmp_path: Path, catalogue: Catalogue) -> World:
    built = world(MemoryStore(), tmp_path / "effects.txt")
    register_catalogue(built.gate.registry, catalogue)
    return built


def _loop(made: World, model: ModelClient, toolset: ToolsetOptions | None = None) -> AgentLoop:
    return made.loop(model, toolset=toolset)


def _load(call_id: str, skill: str) -> ToolCall:
    """A scripted `load_skill` call (its argument is called `name`, as `call`'s is)."""
    return ToolCall(
        id=call_id, name="load_skill", arguments=json.dumps({"name": skill}), provider="scripted"
    )


def _declared(definitions: list[dict[str, Any]], fmt: DefinitionFormat) -> set[str]:
    """The function names a provider payload declares, read the way that provider reads them."""
    match fmt:
        case DefinitionFormat.OPENAI_CHAT:
            return {d["function"]["name"] for d in definitions}
        case DefinitionFormat.GEMINI:
            return {f["name"] for d in definitions for f in d["functionDeclarations"]}
        case _:
            return {d["name"] for d in definitions}


def _stored(made: World, run_id: str) -> tuple[ToolsetChange, ...]:
    record = made.store.get_run(run_id)
    assert record is not None
    return read_run(record).toolset


def _search_then_lookup() -> ScriptedModelClient:
    return ScriptedModelClient(
        [
            reply(call("c1", "search_tools", query="billing")),
            reply(call("c2", "billing_lookup", account="a-1")),
            answer("need_information", "INV-7 is open."),
        ]
    )


@pytest.mark.parametrize(
    "fmt",
    [
        DefinitionFormat.OPENAI_CHAT,
        DefinitionFormat.OPENAI_RESPONSES,
        DefinitionFormat.ANTHROPIC,
        DefinitionFormat.GEMINI,
    ],
)
async def test_after_a_search_the_next_steps_definitions_hold_the_found_tool(
    made: World, fmt: DefinitionFormat
) -> None:
    model = _search_then_lookup()
    outcome = await _loop(made, model).run("Which invoices are open?", ALICE, run_id="r1")
    assert outcome.status is RunStatus.FINISHED
    first, second, third = (_declared(tool_definitions(r.tools, fmt), fmt) for r in model.requests)  # type: ignore[arg-type]
    assert first == CORE
    assert second == third == CORE | {"billing_lookup"}
    # The found tool ran through the gate: it was in the step's exposure.
    record = made.store.get_run("r1")
    assert record is not None
    data = read_run(record)
    assert [c.describe() for c in data.steps[1].calls] == ["ok"]
    assert data.toolset == (
        ToolsetChange(step=1, kind="discovered", source="search_tools", names=("billing_lookup",)),
    )


async def test_a_deferred_tool_called_before_any_search_is_unknown(made: World) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "billing_lookup", account="a-1")), answer("need_information", "No.")]
    )
    outcome = await _loop(made, model).run("Invoices?", ALICE, run_id="r1")
    record = made.store.get_run(outcome.run_id)
    assert record is not None
    assert [c.code for c in read_run(record).steps[0].calls] == ["UNKNOWN_TOOL"]
    assert _stored(made, "r1") == ()


async def test_a_search_found_twice_is_one_discovery(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(call("c1", "search_tools", query="billing")),
            reply(call("c2", "search_tools", query="billing", limit=3)),
            answer("need_information", "Found."),
        ]
    )
    await _loop(made, model).run("Invoices?", ALICE, run_id="r1")
    assert discovered(_stored(made, "r1")) == ("billing_lookup",)
    assert len(_stored(made, "r1")) == 1


async def test_resume_and_replay_keep_the_discovered_tools(made: World) -> None:
    first = ScriptedModelClient(
        [
            reply(call("c1", "search_tools", query="billing")),
            reply(call("c2", "create_ticket", **TICKET_ARGS)),
        ]
    )
    outcome = await _loop(made, first).run("Open a ticket", ALICE, run_id="r1")
    assert outcome.status is RunStatus.SUSPENDED
    (plan_id,) = outcome.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    after = ScriptedModelClient(
        [reply(call("c3", "billing_lookup", account="a-1")), answer("need_information", "Done.")]
    )
    done = await _loop(made, after).resume("r1", ALICE, plan_id=plan_id, token=token.value)
    assert done.status is RunStatus.FINISHED
    assert "billing_lookup" in names_of(after.requests[0].tools)
    record = made.store.get_run("r1")
    assert record is not None
    assert [c.describe() for c in read_run(record).steps[-1].calls] == ["ok"]
    assert discovered(_stored(made, "r1")) == ("billing_lookup",)
    # A replay derives the discovery again, and its model is shown the tool as the run's was.
    recorded = read_run(record)
    replayer = ScriptedModelClient(recorded.replies)
    report = await _loop(made, replayer).replay("r1", model=replayer)
    assert report.matched, report.differences
    assert [("billing_lookup" in names_of(r.tools)) for r in replayer.requests] == [
        False,
        True,
        True,
        True,
    ]


async def test_a_loaded_skill_narrows_the_exposure_to_its_tools(made: World) -> None:
    model = ScriptedModelClient(
        [
            reply(_load("c1", "billing")),
            reply(call("c2", "asset_status", asset_id="asset-1")),
            reply(call("c3", "billing_lookup", account="a-1")),
            answer("need_information", "INV-7."),
        ]
    )
    toolset = ToolsetOptions(skills=library())
    await _loop(made, model, toolset).run("Invoices?", ALICE, run_id="r1")
    assert names_of(model.requests[0].tools) == CORE
    # The library's list, not the envelope's claim (asset_status): the skill's tool is
    # loaded with it, and the catalogue tools stay.
    assert names_of(model.requests[1].tools) == {"billing_lookup", "search_tools", "load_skill"}
    record = made.store.get_run("r1")
    assert record is not None
    data = read_run(record)
    assert [c.describe() for c in data.steps[1].calls] == ["error/UNKNOWN_TOOL"]
    assert [c.describe() for c in data.steps[2].calls] == ["ok"]
    assert active_skills(data.toolset) == ("billing",)
    assert data.toolset[0].source == "load_skill"


async def test_a_skill_listing_tools_the_principal_lacks_never_shows_them(
    made: World, catalogue: Catalogue
) -> None:
    catalogue.claims["audit"] = ["audit_log", "t2_export", "wipe_all", "asset_status"]
    model = ScriptedModelClient(
        [
            reply(_load("c1", "audit")),
            reply(call("c2", "audit_log", day="2026-01-01")),
            reply(call("c3", "t2_export")),
            answer("need_information", "Nothing."),
        ]
    )
    await _loop(made, model, ToolsetOptions(skills=library())).run("Audit", ALICE, run_id="r1")
    for request in model.requests[1:]:
        assert names_of(request.tools) == {"search_tools", "load_skill"}
    record = made.store.get_run("r1")
    assert record is not None
    steps = read_run(record).steps
    assert [c.describe() for step in steps[1:] for c in step.calls] == [
        "error/UNKNOWN_TOOL",
        "error/UNKNOWN_TOOL",
    ]


async def test_a_skill_the_library_does_not_hold_or_no_library_changes_nothing(
    made: World, catalogue: Catalogue
) -> None:
    catalogue.claims["ghost"] = ["billing_lookup"]
    for run_id, toolset in (("r1", None), ("r2", ToolsetOptions(skills=library()))):
        model = ScriptedModelClient(
            [
                reply(_load("c1", "ghost")),
                reply(_load("c2", "billing")),
                answer("need_information", "Nothing."),
            ]
        )
        outcome = await _loop(made, model, toolset).run("Skills", ALICE, run_id=run_id)
        expected = CORE if toolset is None else {"billing_lookup", "search_tools", "load_skill"}
        assert names_of(model.requests[1].tools) == CORE
        assert names_of(model.requests[2].tools) == expected
        assert len(_stored(made, outcome.run_id)) == (0 if toolset is None else 1)


async def test_the_selector_starts_a_run_with_at_most_k_skills_as_a_data_block(
    made: World,
) -> None:
    selector = SkillSelector(["nonexistent", "billing", "audit"])
    model = ScriptedModelClient(
        [reply(call("c1", "billing_lookup", account="a-1")), answer("need_information", "INV-7.")]
    )
    toolset = ToolsetOptions(skills=library(), selector=selector, k=1)
    outcome = await _loop(made, model, toolset).run("Which invoices?", ALICE, run_id="r1")
    assert outcome.status is RunStatus.FINISHED
    assert selector.asked == [("Which invoices?", 1)]
    (task_turn,) = model.requests[0].transcript
    text = task_turn.text  # type: ignore[union-attr]
    assert isinstance(text, str)
    task, block_text = text.split("\n\n", 1)
    assert task == "Which invoices?"
    block = read_block(block_text)
    assert block is not None
    assert (block.trust, block.source) == ("untrusted", "handrail:skills")
    (shown,) = json.loads(block.body)["data"]["skills"]
    assert (shown["skill"], shown["instructions"]) == ("billing", SKILL_TEXT)
    assert names_of(model.requests[0].tools) == {"billing_lookup", "search_tools", "load_skill"}
    assert _stored(made, "r1") == (
        ToolsetChange(step=0, kind="skill", source="selector", names=("billing",)),
    )
    # The replay shows its model the same first turn and the same narrowed tools.
    replayer = ScriptedModelClient(_replies(made, "r1"))
    report = await _loop(made, replayer, toolset).replay("r1", model=replayer)
    assert report.matched, report.differences
    assert replayer.requests[0].transcript == model.requests[0].transcript
    assert names_of(replayer.requests[0].tools) == names_of(model.requests[0].tools)


def _replies(made: World, run_id: str) -> tuple[Any, ...]:
    record = made.store.get_run(run_id)
    assert record is not None
    return read_run(record).replies


async def test_a_selector_with_nothing_held_leaves_the_task_as_it_is(made: World) -> None:
    model = ScriptedModelClient([answer("need_information", "Hm.")])
    toolset = ToolsetOptions(skills=library(), selector=SkillSelector(["nonexistent"]), k=2)
    await _loop(made, model, toolset).run("Hello", ALICE, run_id="r1")
    assert model.requests[0].transcript[0].text == "Hello"  # type: ignore[union-attr]
    assert names_of(model.requests[0].tools) == CORE


def test_the_options_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        ToolsetOptions(k=-1)
    with pytest.raises(ConfigurationError):
        ToolsetOptions(k=17)
    with pytest.raises(ConfigurationError):
        ToolsetOptions(selector=SkillSelector(["billing"]))
    assert ToolsetOptions(skills=library(), selector=SkillSelector([]), k=0).k == 0
    assert {"search_tools", "load_skill", "read_skill_file", "run_skill_script"} == META_TOOLS


async def test_a_run_stored_in_layout_3_reads_with_no_toolset_changes(made: World) -> None:
    await _loop(made, _search_then_lookup()).run("Invoices?", ALICE, run_id="r1")
    record = made.store.get_run("r1")
    assert record is not None
    header = json.loads(record.data)
    header["version"] = 3
    entries = []
    for text in record.entries:
        entry = json.loads(text)
        del entry["toolset"]
        entries.append(json.dumps(entry))
    old = dataclasses.replace(record, run_id="old", data=json.dumps(header), entries=tuple(entries))
    data = read_run(old)
    assert data.toolset == ()
    assert data.steps == read_run(record).steps
    # A whole document of version 2 (no toolset) reads too.
    document = json.loads(read_run(record).to_json())
    assert document["version"] == 4
    del document["toolset"]
    document["version"] = 2
    assert RunData.parse(json.dumps(document)).toolset == ()


async def test_a_tool_shown_before_a_skill_narrowed_the_run_may_still_be_cited(
    made: World,
) -> None:
    toolset = ToolsetOptions(skills=library())
    first = ScriptedModelClient([reply(call("c1", "create_ticket", **TICKET_ARGS))])
    outcome = await _loop(made, first, toolset).run("Open a ticket", ALICE, run_id="r1")
    (plan_id,) = outcome.plan_ids
    token = await made.writes.issue_token(plan_id, ALICE)
    after = ScriptedModelClient(
        [
            reply(_load("c2", "billing")),
            answer("succeeded", "Opened.", tool="create_ticket", plan_id=plan_id),
        ]
    )
    done = await _loop(made, after, toolset).resume("r1", ALICE, plan_id=plan_id, token=token.value)
    # The last step no longer shows create_ticket; the step that ran it did.
    assert "create_ticket" not in names_of(after.requests[1].tools)
    assert done.answer is not None
    assert done.answer.issues == ()
    assert len(done.answer.proven) == 1


async def test_a_replay_whose_search_finds_nothing_reports_the_lost_discovery(
    made: World, catalogue: Catalogue
) -> None:
    model = ScriptedModelClient(
        [reply(call("c1", "search_tools", query="billing")), answer("need_information", "Hm.")]
    )
    await _loop(made, model).run("Invoices?", ALICE, run_id="r1")
    catalogue.found["billing"] = []
    report = await _loop(made, ScriptedModelClient([])).replay("r1")
    assert report.differences == (
        "toolset change 1: recorded discovered ['billing_lookup'] after step 1, replayed none",
    )
