"""Links, hard links and `..` around skill folders: nothing outside a skill folder is ever read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _skill_folders import call, skill_gate, write_skill
from handrail.envelope import Status
from handrail.errors import ErrorCode, InvalidArgument, NotFound
from handrail.skills import SkillError, SkillLibrary

pytestmark = pytest.mark.anyio

SECRET = "TOP-SECRET-OUTSIDE"  # noqa: S105 - a marker, not a password


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text(SECRET)
    (folder / "SKILL.md").write_text(f"---\nname: outside\ndescription: {SECRET}\n---\n{SECRET}\n")
    return folder


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "library"
    root.mkdir()
    return root


def _problems(root: Path) -> list[str]:
    with pytest.raises(SkillError) as caught:
        SkillLibrary.load(root)
    assert SECRET not in str(caught.value)
    return [str(problem) for problem in caught.value.problems]


def test_a_skill_folder_that_is_a_link_is_refused(library: Path, outside: Path) -> None:
    (library / "outside").symlink_to(outside, target_is_directory=True)
    assert _problems(library) == [
        "outside: is a symbolic link; skill folders are never followed through links",
    ]


@pytest.mark.parametrize(
    "where",
    ["SKILL.md", "references/secret.md", "references", "scripts/run.py", "assets/deep/x.md"],
)
def test_a_link_anywhere_in_a_skill_folder_is_refused(
    library: Path,
    outside: Path,
    where: str,
) -> None:
    folder = write_skill(library, "skill", files={"references/ok.md": "ok"})
    link = folder / where
    if link.exists():
        if link.is_dir():
            for child in link.iterdir():
                child.unlink()
            link.rmdir()
        else:
            link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    target = outside if where == "references" else outside / "secret.md"
    link.symlink_to(target)
    problems = _problems(library)
    assert f"skill/{where}: is a symbolic link; links are refused anywhere in a skill" in problems


def test_a_dangling_link_is_refused_too(library: Path) -> None:
    folder = write_skill(library, "skill")
    (folder / "nowhere").symlink_to("/no/such/file")
    assert _problems(library) == [
        "skill/nowhere: is a symbolic link; links are refused anywhere in a skill"
    ]


def test_a_hard_link_to_a_file_outside_is_refused(library: Path, outside: Path) -> None:
    folder = write_skill(library, "skill", files={"references/ok.md": "ok"})
    os.link(outside / "secret.md", folder / "references" / "secret.md")
    assert _problems(library) == [
        "skill/references/secret.md: has several hard links (another may be outside the folder)",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "../../outside/secret.md",
        "references/../../../outside/secret.md",
        "references/../SKILL.md",
        "/etc/passwd",
        "~/secret.md",
        "references\\guide.md",
        "references/guide.md\x00.txt",
        "references/\u202eguide.md",
    ],
)
async def test_read_skill_file_refuses_paths_that_leave_or_hide(
    library: Path,
    outside: Path,
    path: str,
) -> None:
    write_skill(library, "skill", files={"references/guide.md": "# Guide"})
    gate = skill_gate(SkillLibrary.load(library))
    envelope = await call(gate, "read_skill_file", {"skill": "skill", "path": path})
    assert envelope.status is not Status.OK
    assert envelope.error_type in {ErrorCode.INVALID_ARGUMENTS, ErrorCode.NOT_FOUND}
    assert SECRET not in repr(envelope)


def test_a_reference_swapped_for_a_link_after_loading_is_not_followed(
    library: Path,
    outside: Path,
) -> None:
    folder = write_skill(library, "skill", files={"references/guide.md": "# Guide"})
    loaded = SkillLibrary.load(library)
    guide = folder / "references" / "guide.md"
    guide.unlink()
    guide.symlink_to(outside / "secret.md")
    with pytest.raises(InvalidArgument, match="symbolic link"):
        loaded.read_reference("skill", "references/guide.md")


def test_a_references_folder_swapped_for_a_link_is_not_followed(
    library: Path,
    outside: Path,
) -> None:
    folder = write_skill(library, "skill", files={"references/secret.md": "# Mine"})
    loaded = SkillLibrary.load(library)
    (folder / "references" / "secret.md").unlink()
    (folder / "references").rmdir()
    (folder / "references").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidArgument, match="symbolic link"):
        loaded.read_reference("skill", "references/secret.md")


def test_a_skill_folder_swapped_for_a_link_is_not_followed(library: Path, outside: Path) -> None:
    write_skill(library, "skill", files={"references/secret.md": "# Mine"})
    loaded = SkillLibrary.load(library)
    (library / "skill").rename(library / "moved")
    (outside / "references").mkdir()
    (outside / "references" / "secret.md").write_text(SECRET)
    (library / "skill").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidArgument, match="symbolic link"):
        loaded.read_reference("skill", "references/secret.md")


def test_a_removed_reference_is_not_found(library: Path) -> None:
    folder = write_skill(library, "skill", files={"references/guide.md": "# Guide"})
    loaded = SkillLibrary.load(library)
    (folder / "references" / "guide.md").unlink()
    with pytest.raises(NotFound):
        loaded.read_reference("skill", "references/guide.md")
