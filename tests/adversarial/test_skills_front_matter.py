"""Hostile SKILL.md front matter: bombs, tags, permission grabs, sizes; refused with file, line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _skill_folders import write_skill
from handrail.errors import InvalidArgument
from handrail.skills import SkillError, SkillLibrary, SkillLimits, _folder
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

LAUGHS = """name: skill
description: lol
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]"""


def _problems(library: Path, **options: object) -> list[str]:
    with pytest.raises(SkillError) as caught:
        SkillLibrary.load(library, **options)  # type: ignore[arg-type]
    return [str(problem) for problem in caught.value.problems]


def test_a_billion_laughs_is_refused_at_its_first_anchor(tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", front=LAUGHS)
    assert _problems(tmp_path) == [
        (
            "skill/SKILL.md:4: the front matter is not valid YAML: anchors and aliases (& and *) "
            "are not allowed in front matter"
        ),
    ]


def test_an_alias_inside_a_known_key_is_refused_too(tmp_path: Path) -> None:
    front = "name: skill\ndescription: d\ntriggers: [&t x, *t, *t]"
    write_skill(tmp_path, "skill", front=front)
    assert _problems(tmp_path)[0].startswith("skill/SKILL.md:4: the front matter is not valid")


def test_deep_nesting_is_refused_without_exhausting_the_stack(tmp_path: Path) -> None:
    front = "name: skill\ndescription: d\nmetadata: " + "[" * 50_000 + "]" * 50_000
    write_skill(tmp_path, "skill", front=front)
    limits = SkillLimits(max_skill_md_bytes=200_000)
    assert _problems(tmp_path, limits=limits) == [
        (
            "skill/SKILL.md:4: the front matter is not valid YAML: front matter nests deeper "
            "than 8 levels"
        ),
    ]


@pytest.mark.parametrize(
    "value",
    [
        "!!python/object/apply:os.system ['touch /tmp/pwned']",
        "!!python/name:os.system",
        "!!binary aGVsbG8=",
        "!custom thing",
    ],
)
def test_tags_that_build_objects_are_refused(tmp_path: Path, value: str) -> None:
    write_skill(tmp_path, "skill", front=f"name: skill\ndescription: d\nmetadata: {{x: {value}}}")
    [problem] = _problems(tmp_path)
    assert problem.startswith("skill/SKILL.md:4: ")


@pytest.mark.parametrize(
    "key",
    [
        "permissions: [payments.refund]",
        "risk: L0_PUBLIC_READ",
        "Risk_Level: 0",
        "trusted: true",
        "trust: handrail",
        "side_effect: none",
        "roles: [admin]",
        "scopes: ['*']",
        "sudo: true",
    ],
)
def test_a_key_that_tries_to_raise_permissions_is_an_error(tmp_path: Path, key: str) -> None:
    write_skill(tmp_path, "skill", front=f"name: skill\ndescription: d\n{key}")
    [problem] = _problems(tmp_path)
    assert problem.startswith("skill/SKILL.md:4: key ")
    assert "tries to grant permissions or change risk" in problem


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", front='name: skill\ndescription: "open\nallowed-tools: [a\n')
    write_skill(tmp_path, "tabs", front="name: tabs\n\tdescription: d")
    assert _problems(tmp_path) == [
        "skill/SKILL.md:4: the front matter is not valid YAML: found unexpected end of stream",
        (
            "tabs/SKILL.md:3: the front matter is not valid YAML: found character '\\t' that "
            "cannot start any token"
        ),
    ]


def test_a_5_mb_skill_md_is_refused_from_its_size_without_reading_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = write_skill(tmp_path, "skill")
    with (folder / "SKILL.md").open("a") as handle:
        handle.write("x" * (5 * 1024 * 1024))
    read: list[int] = []
    real_read = os.read

    def counting(fd: int, size: int) -> bytes:
        data = real_read(fd, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting)
    assert _problems(tmp_path) == ["skill/SKILL.md: is larger than 65536 bytes"]
    assert read == []


def test_a_file_that_lies_about_its_size_is_read_only_one_byte_past_the_bound(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100_000)
    workspace = Workspace(tmp_path, ignore=())
    real_fstat = os.fstat

    def shrunk(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        return os.stat_result((info.st_mode, *info[1:6], 10, *info[7:]))

    monkeypatch.setattr(os, "fstat", shrunk)
    read: list[int] = []
    real_read = os.read

    def counting(fd: int, size: int) -> bytes:
        read.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", counting)
    with pytest.raises(InvalidArgument, match="larger than 1000 bytes"):
        _folder.read_bounded(workspace, WorkspaceFile(("big",)), 1_000)
    assert sum(read) == 1_001


def test_a_directory_is_not_read_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(InvalidArgument, match="not a regular file"):
        _folder.read_bounded(Workspace(tmp_path, ignore=()), WorkspaceFile(("dir",)), 1_000)
