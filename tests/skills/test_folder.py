from __future__ import annotations

import os
from pathlib import Path

from _skill_folders import write_skill
from handrail.skills import SkillLimits
from handrail.skills._folder import _Walker, open_folder
from handrail.tools.workspace.paths import Workspace


def test_a_folder_gone_or_swapped_before_it_is_opened_is_a_problem(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    library = tmp_path / "library"
    library.mkdir()
    (library / "linked").symlink_to(outside, target_is_directory=True)
    workspace = Workspace(library, ignore=())
    gone = open_folder(workspace, "gone", SkillLimits())
    assert [str(p) for p in gone.problems] == ["gone: does not exist in the workspace"]
    linked = open_folder(workspace, "linked", SkillLimits())
    assert gone.files == linked.files == ()
    assert linked.skill_md is None
    # openat2 says "symbolic link"; O_NOFOLLOW | O_DIRECTORY on a link says "not a directory".
    [problem] = linked.problems
    assert problem.file == "linked"
    assert "symbolic link" in problem.message or "not a directory" in problem.message


def test_a_directory_gone_during_the_walk_is_a_problem(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "skill")
    walker = _Walker("skill", SkillLimits(), [], [])
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walker._walk_into(fd, ("references",))
    finally:
        os.close(fd)
    assert [str(p) for p in walker.problems] == [
        "skill/references: cannot be opened: No such file or directory",
    ]


def test_the_listing_is_sorted_and_holds_regular_files_only(tmp_path: Path) -> None:
    write_skill(tmp_path, "skill", files={"b.txt": "b", "a/c.txt": "c", "a/b/d.txt": "d"})
    found = open_folder(Workspace(tmp_path, ignore=()), "skill", SkillLimits())
    assert found.files == ("SKILL.md", "a/b/d.txt", "a/c.txt", "b.txt")
    assert found.problems == ()
    assert found.skill_md is not None
    assert found.skill_md.startswith("---\nname: skill\n")
