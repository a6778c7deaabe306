"""False positives on ordinary source code: the Redactor (default policy) over the Python
files of packages installed in this environment, which the lock file pins.

Code is the hardest ordinary text for a redactor: names that end in "password" or
"token", long identifiers, paths, hashes, version numbers, test fixtures. Measured when
written (26.4 MB of code): 0.0085% of characters changed, 9.6 findings per MB, nearly
all of them documentation examples that really have the shape of what they are taken
for (`postgres://scott:tiger@...`, `api_key="test-key"`, private addresses in docs and
address tables, base64 samples, authors' e-mails, `+14155550123`).
The bounds leave room for new package versions without letting a detector that fires
on code pass: 0.05% of characters is one character in 2,000, and 30 findings per MB
is about one in every 1,000 lines.

    .venv/bin/python -m pytest -q -s tests/shaping/test_redact_source_code.py  # prints all
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from handrail.shaping.redact import Kind, Redactor

# Libraries of ordinary code. SDKs whose docstrings repeat example object ids (the
# Anthropic SDK shows one random-looking workspace id hundreds of times) are left out:
# such ids are high-entropy strings by design, not false positives of code.
PACKAGES = (
    "pydantic",
    "sqlalchemy",
    "rich",
    "typer",
    "alembic",
    "_pytest",
    "hypothesis",
    "urllib3",
    "requests",
    "openai",
)
MAX_CHANGED_FRACTION = 0.0005
MAX_CHANGED_FRACTION_PER_PACKAGE = 0.001
MAX_FINDINGS_PER_MB = 30


@dataclass
class Scan:
    chars: int = 0
    changed: int = 0
    findings: Counter[Kind] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    per_package: dict[str, float] = field(default_factory=dict)


def _root(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def scan() -> Scan:
    redactor = Redactor(hash_key=b"source-code-scan-key")
    result = Scan()
    for package in PACKAGES:
        root = _root(package)
        if root is None:
            continue
        chars = changed = 0
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            chars += len(text)
            for finding in redactor.find(text):
                changed += finding.end - finding.start
                result.findings[finding.kind] += 1
                value = text[finding.start : finding.end][:60]
                result.examples.append(f"{finding.kind}: {value!r} in {path.relative_to(root)}")
        result.chars += chars
        result.changed += changed
        result.per_package[package] = changed / chars
    megabytes = result.chars / 1e6
    print(  # noqa: T201 - the measurement is the point; shown with -s
        f"\nscanned {megabytes:.1f} MB of code: {result.changed / result.chars:.4%} of "
        f"characters changed, {sum(result.findings.values()) / megabytes:.1f} findings/MB, "
        f"{dict(result.findings)}",
        *result.examples,
        sep="\n  ",
    )
    return result


def test_enough_code_is_scanned_to_mean_something(scan: Scan) -> None:
    assert scan.chars > 10_000_000
    assert len(scan.per_package) >= 8


def test_a_tiny_fraction_of_ordinary_code_is_changed(scan: Scan) -> None:
    assert scan.changed / scan.chars < MAX_CHANGED_FRACTION


def test_no_package_of_ordinary_code_is_changed_much(scan: Scan) -> None:
    assert max(scan.per_package.values()) < MAX_CHANGED_FRACTION_PER_PACKAGE


def test_findings_in_ordinary_code_are_rare(scan: Scan) -> None:
    assert sum(scan.findings.values()) / (scan.chars / 1e6) < MAX_FINDINGS_PER_MB


def test_code_yields_no_national_ids_or_cards(scan: Scan) -> None:
    # Checksums and issuer prefixes keep numbers in code (ids, constants, timestamps)
    # from being taken for cards or IDs; the few present are documented test numbers.
    assert scan.findings[Kind.PAYMENT_CARD] + scan.findings[Kind.PRC_ID] <= 5
