"""Failure lines of a log: which lines say what failed, the test they name, the exit code.

Owns the patterns for test runners (pytest, unittest, go, cargo, jest), tracebacks,
compiler errors, crashes and exit codes, and the triggers every pattern needs. Never
decides which lines an excerpt shows.
"""

from __future__ import annotations

import re

__all__ = ["ASCII_TRIGGERS", "TRIGGERS", "Hit", "classify"]

# Every pattern needs one of the triggers below in the line, so a chunk is searched for the
# triggers only (fast substring search) and only the lines holding one are matched. Each
# trigger costs a pass over every chunk: keep the list short (make's "*** [...] Error N"
# needs no trigger of its own, "rror" finds it).

_CROSS = "\u2715"  # ✕
_TIMES = "\u00d7"  # multiplication sign
_BULLET = "\u25cf"  # ●
_CHEVRON = " \u203a "  # single right-pointing angle quotation mark
TRIGGERS = (
    "FAIL",
    "ERROR",
    "rror",
    "failed",
    "Exception",
    "Traceback (most recent call last)",
    _CROSS,
    _TIMES,
    _BULLET,
    "panic",
    "Segmentation fault",
    "Killed",
    "xit",
)
ASCII_TRIGGERS = (
    "fail",
    "error",
    "exception",
    "traceback (most recent call last)",
    "panic",
    "segmentation fault",
    "killed",
    "xit",
)
"""Lower-case needles for ASCII text: every pattern holds one of them, in any case."""

_STAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.,]+Z?\s+")
"""A CI runner's timestamp before the line (GitHub Actions, Buildkite)."""
_START = re.compile(r"(?:FAILED|FAIL|ERROR)\b")
_PYTEST_SHORT = re.compile(r"(?:FAILED|ERROR) ((?:[^\s\[]|\[[^\]]*\])+)")
_PYTEST_VERBOSE = re.compile(r"(\S+::\S+) (?:FAILED|ERROR)\b")
_UNITTEST = re.compile(r"(?:FAIL|ERROR): (\w+) \(([\w.]+)\)")
_GO = re.compile(r"--- FAIL: (\S+)")
_CARGO = re.compile(r"test (\S+) \.\.\. FAILED\b")
_JEST_DURATION = re.compile(r"\s+\(?\d+(?:\.\d+)?\s*m?s\)?\s*$")
_SUMMARY = re.compile(
    r"[=\s]*(?:\d+ \w+(?: \w+)?, )*[1-9]\d* (?:failed|errors?)(?=,| in \d|\s*=|\s*$)"
)
_EXCEPTION = re.compile(
    r"(?:E\s+)?(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|:?\s*$)"
    r"|Exception in thread "
)
_COMPILER = re.compile(r"error(?:\[[A-Z]?\d+\]| [A-Z]{1,4}\d+)?:(?:\s|$)")
_KILLED = re.compile(r"^\s*Killed(?:: \d+)?\s*$|\b\d+ Killed\s|\bKilled process \d+")
_EXIT = re.compile(r"\b[Ee]xit(?:ed with)? (?:code|status)\b[:=]? ?(-?\d{1,10})\b")
_MAKE = re.compile(r"\bmake(?:\[\d+\])?: \*\*\* \[[^\]]*\] Error (\d{1,10})\b")

Hit = tuple[bool, str | None, int | None]


def classify(line: str) -> Hit | None:
    """Whether a line states a failure, the failing test it names, the exit code it states."""
    if not any(trigger in line for trigger in TRIGGERS):
        return None
    stamp = _STAMP.match(line)
    if stamp:
        line = line[stamp.end() :]
    code = _exit_code(line)
    test = _test_name(line)
    failed = test is not None or bool(code) or _is_failure(line)
    if not failed and code is None:
        return None
    return failed, test, code


def _exit_code(line: str) -> int | None:
    codes: list[str] = []
    if "xit" in line:
        codes += _EXIT.findall(line)
    if "*** [" in line:
        codes += _MAKE.findall(line)
    return int(codes[-1]) if codes else None


def _test_name(line: str) -> str | None:
    stripped = line.lstrip()
    if stripped.startswith(("FAILED ", "ERROR ")):
        match = _PYTEST_SHORT.match(stripped)
        if match and ("::" in match[1] or match[1].endswith(".py")):
            return match[1]
    if stripped.startswith(("FAIL: ", "ERROR: ")):
        match = _UNITTEST.match(stripped)
        if match:
            method, owner = match[1], match[2]
            return owner if owner.endswith(f".{method}") else f"{owner}.{method}"
    if "FAIL" in line or "ERROR" in line:
        match = _PYTEST_VERBOSE.match(line)
        if match:
            return match[1]
    if "FAIL" in line:
        match = _GO.match(stripped) or _CARGO.match(line)
        if match:
            return match[1]
    return _jest_name(stripped)


def _jest_name(stripped: str) -> str | None:
    """A failed jest or vitest test: a cross and its name, or a bullet, suite, chevron, name."""
    if stripped.startswith((f"{_CROSS} ", f"{_TIMES} ")):
        return _JEST_DURATION.sub("", stripped[2:]).strip() or None
    if stripped.startswith(f"{_BULLET} ") and _CHEVRON in stripped:
        return stripped[2:].strip()
    return None


def _is_failure(line: str) -> bool:
    stripped = line.lstrip()
    return (
        (("FAIL" in line or "ERROR" in line) and _START.match(stripped) is not None)
        or stripped.startswith(("test result: FAILED", "Traceback (most recent call last)"))
        or (("failed" in line or "rror" in line) and _SUMMARY.match(line) is not None)
        or (("rror" in line or "Exception" in line) and _EXCEPTION.match(line) is not None)
        or ("error" in line and _compiler_error(line))
        or "panicked at" in line
        or line.startswith("panic: ")
        or "Segmentation fault" in line
        or ("Killed" in line and _KILLED.search(line) is not None)
    )


def _compiler_error(line: str) -> bool:
    """`error:` / `error[E0425]:` / `error TS2304:` as a word, as compilers print it."""
    at = line.find("error")
    while at >= 0:
        before = line[at - 1] if at else " "
        if not (before.isalnum() or before in "_-./") and _COMPILER.match(line, at):
            return True
        at = line.find("error", at + 5)
    return False
