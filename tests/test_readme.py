"""The README's library example runs as written and prints what it claims."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def _quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- quickstart:.*?-->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_example_is_at_most_twenty_lines_of_code() -> None:
    assert len([line for line in _quickstart().splitlines() if line.strip()]) <= 20


def test_the_readme_example_runs_and_prints_an_ok_and_a_refusal() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_quickstart(), "README.md", "exec"), {"__name__": "readme"})  # noqa: S102
    lines = out.getvalue().splitlines()
    shown = json.loads(lines[0])
    assert shown["status"] == "ok"
    assert shown["data"] == {"isbn": "9780134685991", "tenant": "acme", "in_stock": 3}
    assert "'$.isbn': " in lines[1]
    assert "'$.tenant': 'is not allowed'" in lines[1]
