from __future__ import annotations

import json
from pathlib import Path

import pytest

from _skill_folders import EXAMPLES, READER, call, skill_gate, write_skill
from handrail import Principal
from handrail.envelope import Status, Trust
from handrail.errors import ConfigurationError, ErrorCode
from handrail.shaping.budget import HeuristicTokens, cut_to_tokens
from handrail.skills import SkillLibrary, SkillLimits, skill_tools, skills_listing
from handrail.spec import RiskLevel, SideEffect
from handrail.testing import MemoryAuditSink

pytestmark = pytest.mark.anyio


def _skill_events(sink: MemoryAuditSink) -> list[tuple[str, str, dict[str, object]]]:
    return [
        (event.stage, event.decision, json.loads(event.detail or "{}"))
        for event in sink.events
        if event.kind == "skill"
    ]


def test_the_meta_tools_are_read_only_with_untrusted_results() -> None:
    tools = skill_tools(SkillLibrary.load(EXAMPLES), permissions=("skills.use",))
    assert [t.name for t in tools] == ["load_skill", "read_skill_file"]
    for made in tools:
        assert made.spec.risk is RiskLevel.L1_INTERNAL_READ
        assert made.spec.side_effect is SideEffect.NONE
        assert made.spec.results.trust is Trust.UNTRUSTED
        assert made.spec.permissions == {"skills.use"}


def test_load_skill_lists_names_and_one_line_descriptions() -> None:
    library = SkillLibrary.load(EXAMPLES)
    load = skill_tools(library)[0]
    assert load.spec.input_schema["properties"]["name"]["enum"] == list(library.names)
    listing = skills_listing(library)
    assert listing.splitlines() == [f"- {s.name}: {s.summary}" for s in library.skills()]
    assert load.spec.description.endswith(listing)
    assert "never to widen what you may do" in load.spec.description


def test_the_listing_is_bounded_and_names_the_rest(tmp_path: Path) -> None:
    for index in range(30):
        write_skill(
            tmp_path,
            f"skill-{index:02d}",
            front=f"name: skill-{index:02d}\ndescription: {'long words ' * 15}",
        )
    library = SkillLibrary.load(tmp_path, limits=SkillLimits(index_chars=1_000))
    listing = skills_listing(library)
    assert len(listing) <= 1_000
    assert listing.splitlines()[-1].startswith("- and 25 more: skill-05, skill-06")
    tiny = SkillLibrary.load(tmp_path, limits=SkillLimits(index_chars=10))
    assert skills_listing(tiny) == "- and 30 m"


async def test_load_skill_returns_the_contract_shape() -> None:
    library = SkillLibrary.load(EXAMPLES)
    envelope = await call(skill_gate(library), "load_skill", {"name": "order-support"})
    assert envelope.status is Status.OK
    assert envelope.trust is Trust.UNTRUSTED
    assert envelope.data == {
        "skill": "order-support",
        "description": library.get("order-support").description,
        "allowed_tools": ["bookstore.order_status", "bookstore.search_books"],
        "instructions": library.instructions("order-support"),
        "truncated": False,
        "references": ["references/refund-policy.md"],
        "scripts": [],
    }


async def test_instructions_are_cut_to_the_load_budget(tmp_path: Path) -> None:
    body = "".join(f"Step {i}: do a careful thing.\n" for i in range(200))
    write_skill(tmp_path, "long", body=body)
    library = SkillLibrary.load(tmp_path, limits=SkillLimits(load_budget_tokens=100))
    sink = MemoryAuditSink()
    envelope = await call(skill_gate(library, audit=sink), "load_skill", {"name": "long"})
    data = envelope.data
    assert data["truncated"] is True
    assert HeuristicTokens().count(data["instructions"]) <= 100
    assert data["instructions"].endswith("thing.\n")  # cut at a line break
    assert body.startswith(data["instructions"])
    assert _skill_events(sink)[-1] == (
        "loaded",
        "served",
        {
            "skill": "long",
            "chars": len(data["instructions"]),
            "tokens": HeuristicTokens().count(data["instructions"]),
            "body_chars": len(body.strip("\n")),
            "truncated": True,
        },
    )


def test_a_cut_without_a_near_line_break_keeps_the_whole_prefix() -> None:
    tokens = HeuristicTokens()
    assert cut_to_tokens("a\n" + "b" * 100, 10, tokens) == ("a\n" + "b" * 38, True)
    assert cut_to_tokens("short", 10, tokens) == ("short", False)
    assert cut_to_tokens("字" * 20, 5, tokens) == ("字" * 5, True)


async def test_read_skill_file_reads_a_listed_reference_within_budget(tmp_path: Path) -> None:
    write_skill(tmp_path, "guide", files={"references/long.md": "line\n" * 400})
    write_skill(tmp_path, "plain")
    library = SkillLibrary.load(tmp_path, limits=SkillLimits(read_budget_tokens=50))
    sink = MemoryAuditSink()
    tools = skill_tools(library)
    schema = tools[1].spec.input_schema
    assert schema["properties"]["skill"]["enum"] == ["guide"]  # skills with references only
    gate = skill_gate(library, audit=sink)
    envelope = await call(gate, "read_skill_file", {"skill": "guide", "path": "references/long.md"})
    assert envelope.status is Status.OK
    assert envelope.data == {
        "skill": "guide",
        "path": "references/long.md",
        "text": "line\n" * 40,
        "truncated": True,
        "total_chars": 2_000,
    }
    assert _skill_events(sink)[-1] == (
        "reference",
        "served",
        {"skill": "guide", "path": "references/long.md", "chars": 200, "truncated": True},
    )


async def test_a_reference_that_is_not_text_is_refused(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "guide", files={"references/image.md": ""})
    (folder / "references" / "image.md").write_bytes(b"\x89PNG\xff\xfe")
    sink = MemoryAuditSink()
    gate = skill_gate(SkillLibrary.load(tmp_path), audit=sink)
    envelope = await call(
        gate, "read_skill_file", {"skill": "guide", "path": "references/image.md"}
    )
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert _skill_events(sink)[-1][:2] == ("reference", "refused")


async def test_an_unlisted_path_is_not_found_and_audited(tmp_path: Path) -> None:
    write_skill(tmp_path, "guide", files={"references/a.md": "a", "scripts/s.py": "print()"})
    sink = MemoryAuditSink()
    gate = skill_gate(SkillLibrary.load(tmp_path), audit=sink)
    envelope = await call(gate, "read_skill_file", {"skill": "guide", "path": "scripts/s.py"})
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert _skill_events(sink)[-1] == (
        "reference",
        "refused",
        {"skill": "guide", "path": "scripts/s.py"},
    )
    event = next(e for e in sink.events if e.kind == "skill" and e.stage == "reference")
    assert event.code == "NOT_FOUND"
    assert (event.tool, event.user_id, event.tenant_id) == ("read_skill_file", "u1", "t1")


async def test_offered_skills_are_audited_once_when_the_tools_are_made() -> None:
    sink = MemoryAuditSink()
    skill_tools(SkillLibrary.load(EXAMPLES), audit=sink)
    assert _skill_events(sink) == [
        (
            "offered",
            "load_skill",
            {"skills": ["inventory-report", "order-support", "release-notes"]},
        ),
    ]


async def test_the_tools_need_their_permission() -> None:
    gate = skill_gate(SkillLibrary.load(EXAMPLES))
    stranger = Principal(user_id="u2", tenant_id="t1")
    envelope = await call(gate, "load_skill", {"name": "order-support"}, stranger)
    assert envelope.status is not Status.OK
    assert (await call(gate, "load_skill", {"name": "order-support"}, READER)).status is Status.OK


async def test_only_a_listed_skill_name_is_accepted() -> None:
    gate = skill_gate(SkillLibrary.load(EXAMPLES))
    for arguments in ({"name": "../order-support"}, {"name": "ORDER-SUPPORT"}, {}):
        envelope = await call(gate, "load_skill", arguments)
        assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


def test_an_empty_library_makes_no_tools(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="empty"):
        skill_tools(SkillLibrary.load(tmp_path))


def test_without_references_there_is_no_read_tool(tmp_path: Path) -> None:
    write_skill(tmp_path, "plain")
    assert [t.name for t in skill_tools(SkillLibrary.load(tmp_path))] == ["load_skill"]
