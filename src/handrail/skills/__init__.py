"""Skills: capability packs (instructions, references, scripts) loaded only when needed.

A library of folders in the Agent Skills layout (`SKILL.md` with YAML front matter, then
`references/`, `scripts/`, `assets/`), checked on load with problems naming file and
line; a host-side selector; and the meta-tools `load_skill`, `read_skill_file` and
`run_skill_script`. A skill's text is untrusted data, its allowed tools only narrow what
a principal may use, and its scripts run only in the command sandbox.
"""

from handrail.skills._limits import SkillLimits
from handrail.skills._problems import SkillError, SkillProblem
from handrail.skills.library import SkillLibrary, check_library
from handrail.skills.selector import SkillSelector
from handrail.skills.skill import Skill
from handrail.skills.tools import (
    LOAD_SKILL,
    READ_SKILL_FILE,
    RUN_SKILL_SCRIPT,
    skill_tools,
    skills_listing,
)

__all__ = [
    "LOAD_SKILL",
    "READ_SKILL_FILE",
    "RUN_SKILL_SCRIPT",
    "Skill",
    "SkillError",
    "SkillLibrary",
    "SkillLimits",
    "SkillProblem",
    "SkillSelector",
    "check_library",
    "skill_tools",
    "skills_listing",
]
