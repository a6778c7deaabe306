"""The ripgrep command line of a search: its checked query and the argument vector.

Owns the query ripgrep gets (pattern, case, context, include and exclude globs, the
roots) and the command line built from it by code: the pattern only as the value of
`--regexp=`, paths only after `--`, globs only as ripgrep file types, never a flag the
model chose. It never runs ripgrep (`_rg_process` does) and never resolves a path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from handrail.errors import InvalidArgument

__all__ = [
    "CASE_FLAGS",
    "MAX_GLOBS",
    "MAX_GLOB_CHARS",
    "Case",
    "Query",
    "check_globs",
    "rg_argv",
    "rg_glob",
]

Case = Literal["smart", "sensitive", "insensitive"]
CASE_FLAGS: Mapping[str, str] = {
    "smart": "--smart-case",
    "sensitive": "--case-sensitive",
    "insensitive": "--ignore-case",
}
MAX_GLOBS = 8
MAX_GLOB_CHARS = 100

_GLOB_TYPE_INCLUDE = "handrailinclude"
_GLOB_TYPE_EXCLUDE = "handrailexclude"
_FORBIDDEN_GLOB = re.compile(r"[/\\:\x00-\x1f\x7f]")


@dataclass(frozen=True, kw_only=True, slots=True)
class Query:
    """A search's checked arguments, as ripgrep gets them."""

    pattern: str
    regex: bool
    case: str
    context: int
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    roots: tuple[str, ...]


def rg_argv(
    rg: str,
    query: Query,
    *,
    ordered: bool,
    regex_size_limit: int,
    dfa_size_limit: int,
    ignored: Sequence[str],
) -> list[str]:
    """The whole command line, built here; model text only after `=` or `--`."""
    argv = [
        rg,
        "--json",
        "--no-config",
        "--no-follow",
        "--no-messages",
        "--no-require-git",
        "--no-ignore-parent",
        "--no-ignore-global",
        f"--regex-size-limit={regex_size_limit}",
        f"--dfa-size-limit={dfa_size_limit}",
        CASE_FLAGS[query.case],
        *ignored,
    ]
    if not query.regex:
        argv.append("--fixed-strings")
    if query.context:
        argv.append(f"--context={query.context}")
    for name, chosen, select in (
        (_GLOB_TYPE_INCLUDE, query.include, "--type"),
        (_GLOB_TYPE_EXCLUDE, query.exclude, "--type-not"),
    ):
        if chosen:
            argv.extend(f"--type-add={name}:{glob}" for glob in chosen)
            argv.append(f"{select}={name}")
    if ordered:
        argv.append("--sort=path")
    argv.append(f"--regexp={query.pattern}")
    argv.append("--")
    argv.extend(query.roots)
    return argv


def rg_glob(pattern: str) -> str:
    """An ignore pattern (one name, no braces or backslashes) in ripgrep's glob syntax.

    Both read `*`, `?` and classes alike within a name; a run of stars is one star.
    """
    return re.sub(r"\*{2,}", "*", pattern)


def check_globs(globs: Iterable[str], what: str) -> tuple[str, ...]:
    """File-name globs, checked: they become ripgrep file types, which honour ignore files.

    A `--glob` would override ignore files, so the model's globs are never one. As with
    ripgrep's own types, an include glob can select a hidden file (`.env.example`),
    never an ignored one, and never a file inside a hidden directory such as `.git`.
    """
    chosen = tuple(globs)
    if len(chosen) > MAX_GLOBS:
        raise InvalidArgument(f"Give at most {MAX_GLOBS} {what} globs.")
    for glob in chosen:
        if not isinstance(glob, str) or not 1 <= len(glob) <= MAX_GLOB_CHARS:
            raise InvalidArgument(f"An {what} glob must be 1-{MAX_GLOB_CHARS} characters.")
        if _FORBIDDEN_GLOB.search(glob):
            raise InvalidArgument(
                f"An {what} glob matches file names, like '*.py': it must not contain '/', "
                f"'\\', ':' or control characters. Choose directories with paths.",
            )
        if glob.startswith("!"):
            raise InvalidArgument("Put a glob to leave out in exclude, without '!'.")
    return chosen
