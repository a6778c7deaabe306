from __future__ import annotations

import os
from pathlib import Path

import pytest

from _skill_folders import EXAMPLES, stand_in_registry, write_skill
from handrail.errors import ConfigurationError, InvalidArgument, NotFound
from handrail.skills import SkillError, SkillLibrary, SkillLimits, SkillProblem, check_library


def _problems(library: Path, **options: object) -> list[str]:
    with pytest.raises(SkillError) as caught:
        SkillLibrary.load(library, **options)  # type: ignore[arg-type]
    return [str(problem) for problem in caught.value.problems]


def test_the_example_skills_load_with_their_tools_registered() -> None:
    library = SkillLibrary.load(EXAMPLES, registry=stand_in_registry())
    assert library.names == ("inventory-report", "order-support", "release-notes")
    assert len(library) == 3
    assert "order-support" in library
    assert "nope" not in library
    skill = library.get("inventory-report")
    assert skill.allowed_tools == {"bookstore.check_inventory", "bookstore.search_books"}
    assert skill.triggers == ("inventory", "stock report", "reorder", "库存")
    assert skill.references == ("references/report-format.md",)
    assert skill.scripts == ("scripts/reorder_points.py",)
    assert skill.assets == ("assets/lead_times.csv",)
    assert skill.compatibility is not None
    assert skill.root == EXAMPLES / "inventory-report"
    support = library.get("order-support")
    assert dict(support.metadata) == {"owner": "support-team", "version": "1.2"}
    assert support.license == "Apache-2.0"
    assert library.get("release-notes").allowed_tools == frozenset()
    assert library.instructions("release-notes").startswith("# Release notes\n")
    assert library.root == EXAMPLES
    assert library.limits == SkillLimits()


def test_the_index_holds_front_matter_and_the_body_is_kept_aside() -> None:
    library = SkillLibrary.load(EXAMPLES)
    skill = library.get("order-support")
    assert not hasattr(skill, "instructions")
    assert skill.body_chars == len(library.instructions("order-support"))
    assert 0 < skill.body_tokens <= skill.body_chars
    with pytest.raises(KeyError):
        library.get("missing")


def test_a_summary_is_one_bounded_line(tmp_path: Path) -> None:
    long = "word " * 100
    write_skill(tmp_path, "wide", front=f"name: wide\ndescription: |\n  first\n  {long}")
    summary = SkillLibrary.load(tmp_path).get("wide").summary
    assert "\n" not in summary
    assert summary.startswith("first word")
    assert len(summary) == 200
    assert summary.endswith("...")


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("name: Bad_Name\ndescription: d", "skill/SKILL.md:2: name must be lowercase"),
        ("name: -skill\ndescription: d", "skill/SKILL.md:2: name must be lowercase"),
        ("name: a--b\ndescription: d", "skill/SKILL.md:2: name must be lowercase"),
        ("name: other\ndescription: d", "skill/SKILL.md:2: name 'other' must equal"),
        (f"name: {'a' * 65}\ndescription: d", "skill/SKILL.md:2: name is 65 characters"),
        ("description: d", "skill/SKILL.md:1: the front matter has no 'name'"),
        ("name: skill", "skill/SKILL.md:1: the front matter has no 'description'"),
        ("name: skill\ndescription:", "skill/SKILL.md:3: description must not be empty"),
        ("name: skill\ndescription: ' '", "skill/SKILL.md:3: description must be non-empty"),
        ("name: skill\ndescription: 12", "skill/SKILL.md:3: description must be non-empty"),
        (
            f"name: skill\ndescription: {'d' * 1025}",
            "skill/SKILL.md:3: description is 1025 characters; at most 1024",
        ),
        ('name: skill\ndescription: "a\\x1b[2Jb"', "skill/SKILL.md:3: description holds control"),
        ("name: skill\ndescription: d\nversion: 2", "skill/SKILL.md:4: unknown key 'version'"),
        (
            "name: skill\ndescription: d\nallowed-tools: 5",
            "skill/SKILL.md:4: allowed-tools must be",
        ),
        (
            "name: skill\ndescription: d\nallowed-tools:\n  - ok.tool\n  - [x]",
            "skill/SKILL.md:6: allowed-tools entry ['x'] is not a tool name",
        ),
        (
            "name: skill\ndescription: d\nallowed-tools: " + " ".join(f"t{i}" for i in range(129)),
            "skill/SKILL.md:4: allowed-tools lists 129 tools",
        ),
        (
            "name: skill\ndescription: d\ntriggers: word",
            "skill/SKILL.md:4: triggers must be a list",
        ),
        (
            "name: skill\ndescription: d\ntriggers:\n  - ok\n  - ''",
            "skill/SKILL.md:6: trigger '' must be text",
        ),
        ("name: skill\ndescription: d\ntriggers: [true]", "skill/SKILL.md:4: trigger True must"),
        (
            "name: skill\ndescription: d\nmetadata: [a]",
            "skill/SKILL.md:4: metadata must be a mapping",
        ),
        ("name: skill\ndescription: d\nmetadata: {1: a}", "skill/SKILL.md:4: metadata key 1"),
        ("name: skill\ndescription: d\nmetadata: {a: [b]}", "skill/SKILL.md:4: metadata['a'] must"),
        (
            f"name: skill\ndescription: d\nmetadata: {{a: {'x' * 513}}}",
            "skill/SKILL.md:4: metadata['a'] is too long",
        ),
        ("name: skill\ndescription: d\nlicense: [MIT]", "skill/SKILL.md:4: license must be"),
        (
            f"name: skill\ndescription: d\ncompatibility: {'c' * 501}",
            "skill/SKILL.md:4: compatibility is 501 characters",
        ),
    ],
)
def test_each_broken_rule_names_the_file_and_line(
    tmp_path: Path,
    front: str,
    expected: str,
) -> None:
    write_skill(tmp_path, "skill", front=front)
    problems = _problems(tmp_path)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_the_accepted_forms_of_each_optional_key(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "skill",
        front=(
            "name: skill\ndescription: '  padded  '\nallowed-tools: a.b  c.d a.b\n"
            "triggers: [Stock  Report, 2024, 库存, Stock report]\nmetadata: {v: 1.5, n: 3}\n"
            "license: MIT\ncompatibility: python3"
        ),
    )
    skill = SkillLibrary.load(tmp_path).get("skill")
    assert skill.description == "padded"
    assert skill.allowed_tools == {"a.b", "c.d"}
    assert skill.triggers == ("stock report", "2024", "库存")
    assert dict(skill.metadata) == {"v": "1.5", "n": "3"}


def test_every_problem_of_every_skill_is_reported_at_once(tmp_path: Path) -> None:
    write_skill(tmp_path, "one", front="name: One\ndescription: d\nextra: 1")
    write_skill(tmp_path, "two", front="name: two")
    write_skill(tmp_path, "good")
    problems = _problems(tmp_path)
    assert len(problems) == 3
    skills, found = check_library(tmp_path)
    assert [skill.name for skill in skills] == ["good"]
    assert [str(problem) for problem in found] == problems


def test_a_listed_tool_must_be_registered(tmp_path: Path) -> None:
    front = (
        "name: skill\ndescription: d\nallowed-tools:\n  - bookstore.order_status\n  - shell.exec"
    )
    write_skill(tmp_path, "skill", front=front)
    assert _problems(tmp_path, registry=stand_in_registry()) == [
        "skill/SKILL.md:6: allowed-tools names 'shell.exec', which is not a registered tool",
    ]
    # Without a registry the names are not checked; they still only narrow.
    assert SkillLibrary.load(tmp_path).get("skill").allowed_tools == {
        "bookstore.order_status",
        "shell.exec",
    }


def test_a_space_separated_tool_not_registered_names_the_key_line(tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", front="name: skill\ndescription: d\nallowed-tools: x.y")
    assert _problems(tmp_path, registry=stand_in_registry()) == [
        "skill/SKILL.md:4: allowed-tools names 'x.y', which is not a registered tool",
    ]


def test_a_body_over_the_token_limit_is_refused_at_its_first_line(tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", body="word " * 100)
    limits = SkillLimits(max_body_tokens=100)
    assert _problems(tmp_path, limits=limits) == [
        (
            "skill/SKILL.md:5: the body is about 125 tokens; at most 100 are allowed "
            "(move detail into references/)"
        ),
    ]


def test_folders_without_skill_md_and_stray_files_at_the_root(tmp_path: Path) -> None:
    write_skill(tmp_path, "good")
    (tmp_path / "README.md").write_text("not a skill")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "empty").mkdir()
    assert _problems(tmp_path) == ["empty: has no SKILL.md"]


def test_size_limits_on_files_depth_and_skills(tmp_path: Path) -> None:
    files = {f"references/r{i}.md": "x" for i in range(5)}
    write_skill(tmp_path, "many", files=files)
    write_skill(tmp_path, "deep", files={"assets/a/b/c/d.txt": "x"})
    limits = SkillLimits(max_files=3, max_depth=2, max_skills=5)
    assert _problems(tmp_path, limits=limits) == [
        "deep/assets/a/b: is nested deeper than 2 levels",
        "many: holds more than 3 files",
    ]
    assert _problems(tmp_path, limits=SkillLimits(max_skills=1)) == [
        ".: holds more than 1 skill folders",
    ]


def test_skill_md_must_be_utf8_text(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "skill")
    (folder / "SKILL.md").write_bytes(b"---\nname: skill\ndescription: caf\xe9\n---\n")
    assert _problems(tmp_path) == ["skill/SKILL.md:3: is not UTF-8 text"]


def test_a_byte_order_mark_is_allowed(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "skill")
    (folder / "SKILL.md").write_bytes(b"\xef\xbb\xbf---\nname: skill\ndescription: d\n---\n")
    assert SkillLibrary.load(tmp_path).names == ("skill",)


def test_special_files_and_odd_names_are_problems(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "skill")
    os.mkfifo(folder / "pipe")
    (folder / "bad\x07name").write_text("x")
    latin = os.fsdecode(b"latin\xe9")
    (folder / latin).write_text("x")
    assert _problems(tmp_path) == [
        "skill/bad\x07name: has a name with control, invisible or backslash characters",
        f"skill/{latin}: has a name that is not UTF-8",
        "skill/pipe: is not a regular file or directory",
    ]


def test_the_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be opened"):
        SkillLibrary.load(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not a directory"):
        SkillLibrary.load(tmp_path / "file")


def test_an_empty_library_loads(tmp_path: Path) -> None:
    assert SkillLibrary.load(tmp_path).names == ()


def test_references_are_read_on_request_and_only_listed_ones(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "skill",
        files={"references/guide.md": "# Guide\n", "scripts/x.py": "print(1)\n", "notes.txt": "n"},
    )
    library = SkillLibrary.load(tmp_path)
    assert library.read_reference("skill", "references/guide.md") == b"# Guide\n"
    assert library.read_reference("skill", "./references//guide.md") == b"# Guide\n"
    for path in ("scripts/x.py", "notes.txt", "SKILL.md", "references/missing.md"):
        with pytest.raises(NotFound):
            library.read_reference("skill", path)
    with pytest.raises(NotFound):
        library.read_reference("other", "references/guide.md")
    for path in ("../skill/references/guide.md", "/etc/passwd", "references\\guide.md", ""):
        with pytest.raises(InvalidArgument):
            library.read_reference("skill", path)


def test_a_reference_that_grew_past_the_limit_is_refused(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "skill", files={"references/big.md": "x"})
    library = SkillLibrary.load(tmp_path, limits=SkillLimits(max_file_bytes=10))
    (folder / "references" / "big.md").write_text("x" * 11)
    with pytest.raises(InvalidArgument, match="larger than 10 bytes"):
        library.read_reference("skill", "references/big.md")


def test_limits_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="max_files"):
        SkillLimits(max_files=0)


def test_an_error_message_lists_at_most_twenty_problems() -> None:
    error = SkillError([SkillProblem(file="f", line=i, message="m") for i in range(25)])
    assert str(error).splitlines()[0] == "f:0: m"
    assert str(error).splitlines()[-1] == "... and 5 more problems"
    assert len(str(error).splitlines()) == 21
    assert str(SkillError([])) == "the skill library is not valid"
    assert str(SkillProblem(file="f", line=None, message="m")) == "f: m"
