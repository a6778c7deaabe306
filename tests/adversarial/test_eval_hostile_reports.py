"""Attacks on `handrail eval report` / `compare` through the JSON files they read.

A saved report is input: not JSON, another version, numbers no chart can scale (NaN,
Infinity, 1e400), negative counts, a JSON bomb, an endless device, a file over the size
bound; and names carrying terminal escapes or HTML. Each is one `error:` line (exit 2)
or, for text, shown escaped in the terminal and in the HTML page.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from _hand_reports import report, scenario, two_scenarios
from handrail.cli import app
from handrail.eval.report import MAX_REPORT_BYTES, Metric

ESC = "\x1b[2J\x1b]0;owned\x07"
CSI = "\x9b31m"
BIDI = "\u202e"
SCRIPT = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["eval", *args], env={"COLUMNS": "200"})


def _valid() -> dict[str, Any]:
    return json.loads(two_scenarios().model_dump_json())


def _write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _spoiled(path: Path, number: str, where: str) -> Path:
    """The valid report with one number replaced by the literal `number` (NaN is not JSON)."""
    document = _valid()
    marker = 987654.321
    if where == "value":
        document["scenarios"][0]["metrics"][0]["value"] = marker
    else:
        document["scenarios"][0]["latencies_ms"]["shop.order"][0] = marker
    path.write_text(json.dumps(document).replace(str(marker), number), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize(
    "content",
    [
        b"not json at all",
        b"\xff\xfe\x00garbage",
        b"[" * 200_000 + b"]" * 200_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        json.dumps({**_valid(), "version": 2}).encode(),
        json.dumps({**_valid(), "extra": 1}).encode(),
        b"",
    ],
    ids=["text", "binary", "array-bomb", "object-bomb", "version-2", "unknown-field", "empty"],
)
def test_a_file_that_is_not_a_report_is_one_error_line(
    tmp_path: Path, command: str, content: bytes
) -> None:
    hostile = tmp_path / "hostile.json"
    hostile.write_bytes(content)
    good = _write(tmp_path / "good.json", _valid())
    args = ("report", str(hostile)) if command == "report" else ("compare", str(good), str(hostile))
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "is not a report handrail eval wrote" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
@pytest.mark.parametrize("where", ["value", "latency"])
def test_a_number_no_chart_can_scale_is_refused_before_any_page_is_written(
    tmp_path: Path, number: str, where: str
) -> None:
    hostile = _spoiled(tmp_path / "r.json", number, where)
    page = tmp_path / "r.html"
    result = _invoke("report", str(hostile), "--html", str(page))
    assert result.exit_code == 2, result.output
    assert "is not a report handrail eval wrote" in result.stderr
    assert not page.exists()


@pytest.mark.parametrize("field", ["numerator", "denominator"])
def test_a_negative_count_is_refused(tmp_path: Path, field: str) -> None:
    document = _valid()
    document["scenarios"][0]["metrics"][0][field] = -3
    result = _invoke("report", str(_write(tmp_path / "r.json", document)))
    assert result.exit_code == 2
    assert "is not a report handrail eval wrote" in result.stderr


def test_a_file_over_the_bound_is_refused_without_being_parsed(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as out:  # sparse: the bound is checked on the bytes read
        out.seek(MAX_REPORT_BYTES)
        out.write(b" ")
    result = _invoke("report", str(big))
    assert result.exit_code == 2
    assert "MiB: not a report handrail eval wrote" in result.stderr


def test_an_endless_device_is_read_only_up_to_the_bound() -> None:
    result = _invoke("report", "/dev/zero")
    assert result.exit_code == 2
    assert "MiB: not a report handrail eval wrote" in result.stderr


def test_a_directory_or_a_missing_file_is_one_error_line(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "missing.json"):
        result = _invoke("report", str(path))
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ")


def _hostile_report() -> Any:
    evil = f"{ESC}{CSI}{BIDI}{SCRIPT}"
    return report(
        scenario(
            f"s{evil}",
            Metric.rate("success_rate", 1, 2),
            Metric.amount(f"made_up{evil}", 3),
            passed=False,
            failures=(f"failure{evil}",),
            notes=(f"note{evil}",),
            latencies={f"tool{evil}": (1.0, 2.0)},
            title=f"title{evil}",
        ),
        totals=(Metric.amount(f"made_up{evil}", 3),),
        suite=f"suite{evil}",
        model=f"model{evil}",
    )


def test_the_terminal_table_passes_no_control_character_through(tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_text(_hostile_report().model_dump_json(), encoding="utf-8")
    result = _invoke("report", str(saved))
    assert result.exit_code == 1  # the scenario failed: shown, not an error
    for control in ("\x1b", "\x07", "\x9b", BIDI):
        assert control not in result.stdout
    assert "\\x1b" in result.stdout


def test_compare_passes_no_control_character_through(tmp_path: Path) -> None:
    hostile = _hostile_report()
    before = _write(tmp_path / "a.json", json.loads(hostile.model_dump_json()))
    document = json.loads(hostile.model_dump_json())
    document["scenarios"][0]["metrics"][0] = Metric.rate("success_rate", 0, 2).model_dump()
    document["scenarios"].append({**document["scenarios"][0], "name": f"new{ESC}"})
    after = _write(tmp_path / "b.json", document)
    result = _invoke("compare", str(before), str(after), "--all")
    assert result.exit_code == 1, result.output
    assert "REGRESSED" in result.stdout
    for control in ("\x1b", "\x07", "\x9b", BIDI):
        assert control not in result.stdout


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.extend(attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_html_page_escapes_every_text_from_the_report(tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_text(_hostile_report().model_dump_json(), encoding="utf-8")
    page = tmp_path / "r.html"
    assert _invoke("report", str(saved), "--html", str(page)).exit_code == 1
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html
    assert "<img" not in html
    parsed = _Page()
    parsed.feed(html)
    assert not parsed.tags & {"script", "img", "iframe", "object", "embed"}
    assert not any(name.startswith("on") for name, _ in parsed.attributes)
    assert any(SCRIPT in text for text in parsed.text)  # shown as text, once decoded
