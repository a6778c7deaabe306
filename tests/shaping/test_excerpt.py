"""Log excerpts: head, tail and failure lines of any text, exact counts, a hard size bound."""

from __future__ import annotations

import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import Excerpt, ExcerptBuilder, ExcerptLimits, excerpt_text
from handrail.shaping.excerpt import _cut as cut

SMALL = ExcerptLimits(head_lines=3, tail_lines=4)


def _numbered(count: int, end: str = "\n") -> str:
    return "".join(f"line {i}{end}" for i in range(1, count + 1))


def _lines_of(text: str) -> int:
    return text.count("\n") + (text != "" and not text.endswith("\n"))


def _chunked(
    text: str, sizes: list[int], limits: ExcerptLimits, *, failures: bool = True
) -> Excerpt:
    builder = ExcerptBuilder(limits, failures=failures)
    start = 0
    for size in sizes:
        builder.feed(text[start : start + size])
        start += size
    builder.feed(text[start:])
    return builder.finish()


def _log(*middle: str, before: int = 10, after: int = 10) -> tuple[str, int]:
    """A log with `middle` lines after `before` plain lines; the number of the first one."""
    lines = [f"step {i} ok" for i in range(before)]
    lines += middle
    lines += [f"step {i} ok" for i in range(after)]
    return "\n".join(lines) + "\n", before + 1


# --- short, long, empty -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["a", "a\nb", "a\nb\n", "a\r\nb\r\n", "\n", "\n\n\n", "one\rtwo\n", "中文 😀\nend"],
)
def test_a_short_text_is_shown_whole_and_not_truncated(text: str) -> None:
    excerpt = excerpt_text(text)
    assert excerpt.text == text
    assert excerpt.truncated is False
    assert excerpt.total_chars == len(text)
    assert excerpt.total_lines == excerpt.kept_lines == _lines_of(text)
    assert excerpt.omitted_lines == 0


def test_empty_input_gives_an_empty_excerpt() -> None:
    assert excerpt_text("") == Excerpt(
        text="",
        total_chars=0,
        total_lines=0,
        kept_lines=0,
        omitted_lines=0,
        failures=(),
        failed_tests=(),
        exit_code=None,
        truncated=False,
    )
    assert ExcerptBuilder().finish().text == ""


def test_a_long_text_keeps_head_and_tail_and_says_exactly_what_was_omitted() -> None:
    text = _numbered(100)
    excerpt = excerpt_text(text, SMALL)
    omitted_chars = (
        len(text) - len("line 1\nline 2\nline 3\n") - len("line 97\nline 98\nline 99\nline 100\n")
    )
    assert excerpt.text == (
        "line 1\nline 2\nline 3\n"
        f"[... 93 lines ({omitted_chars} chars) omitted ...]\n"
        "line 97\nline 98\nline 99\nline 100\n"
    )
    assert (excerpt.total_lines, excerpt.kept_lines, excerpt.omitted_lines) == (100, 7, 93)
    assert excerpt.total_chars == len(text)
    assert excerpt.truncated is True


def test_a_text_of_exactly_head_plus_tail_lines_is_not_truncated() -> None:
    text = _numbered(7)
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.text == text
    assert excerpt.truncated is False


def test_the_last_line_without_newline_ends_the_tail() -> None:
    text = _numbered(20) + "last words"
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.text.endswith("line 18\nline 19\nline 20\nlast words")
    assert excerpt.total_lines == 21


def test_a_long_line_is_cut_with_a_marker_of_the_chars_left_out() -> None:
    text = "x" * 1200 + "\nshort\n"
    excerpt = excerpt_text(text, ExcerptLimits(max_line_chars=500))
    assert excerpt.text == "x" * 500 + "[... 700 chars cut ...]\nshort\n"
    assert excerpt.truncated is True
    assert excerpt.omitted_lines == 0
    assert excerpt.kept_lines == 2


def test_lines_too_long_for_max_chars_are_dropped_in_proportion_and_reported() -> None:
    text = "".join(f"{i:02d}{'.' * 7}\n" for i in range(10))  # 10 lines of 10 chars
    limits = ExcerptLimits(head_lines=5, tail_lines=5, max_chars=80)
    excerpt = excerpt_text(text, limits)
    assert len(excerpt.text) <= 80
    assert excerpt.text.startswith("00.......\n")
    assert excerpt.text.endswith("09.......\n")
    omitted = excerpt.omitted_lines
    assert omitted > 0
    assert f"[... {omitted} lines ({omitted * 10} chars) omitted ...]\n" in excerpt.text
    assert excerpt.kept_lines + omitted == 10
    assert excerpt.truncated is True


def test_a_max_chars_too_small_even_for_markers_still_bounds_the_text() -> None:
    excerpt = excerpt_text(_numbered(100), ExcerptLimits(max_chars=10, head_lines=2))
    assert len(excerpt.text) <= 10
    assert excerpt.truncated is True
    zero = excerpt_text("abc", ExcerptLimits(max_chars=0))
    assert zero.text == ""
    assert zero.truncated is True


def test_disabled_failures_find_nothing_but_shape_the_same() -> None:
    text, _ = _log("FAILED tests/test_x.py::test_y - boom", "exit code 3")
    plain = excerpt_text(text, SMALL, failures=False)
    assert plain.failures == ()
    assert plain.failed_tests == ()
    assert plain.exit_code is None
    assert "FAILED" not in plain.text
    assert plain.total_lines == excerpt_text(text, SMALL).total_lines


def test_the_builder_refuses_chunks_after_finish_and_finishes_once() -> None:
    builder = ExcerptBuilder()
    builder.feed("a\n")
    first = builder.finish()
    assert builder.finish() is first
    with pytest.raises(ConfigurationError):
        builder.feed("b\n")


@pytest.mark.parametrize(
    "field",
    ["max_chars", "head_lines", "tail_lines", "max_failure_lines"],
)
def test_negative_limits_are_refused(field: str) -> None:
    with pytest.raises(ConfigurationError):
        ExcerptLimits(**{field: -1})


def test_a_line_width_below_one_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        ExcerptLimits(max_line_chars=0)


# --- line endings and unicode -----------------------------------------------------------------


def test_crlf_line_endings_are_kept_and_a_split_pair_is_one_ending() -> None:
    text = _numbered(30, "\r\n")
    whole = excerpt_text(text, SMALL)
    assert whole.text.startswith("line 1\r\nline 2\r\nline 3\r\n[... 23 lines")
    assert whole.text.endswith("line 27\r\nline 28\r\nline 29\r\nline 30\r\n")
    assert whole.total_lines == 30
    split_at = text.index("\r\n", 100) + 1  # between "\r" and "\n"
    assert _chunked(text, [split_at], SMALL) == whole
    assert _chunked(text, [1] * len(text), SMALL) == whole


def test_a_failure_line_ending_in_crlf_is_shown_without_the_carriage_return() -> None:
    text, first = _log("FAILED tests/a.py::t - boom")
    excerpt = excerpt_text(text.replace("\n", "\r\n"), SMALL)
    assert excerpt.failures == (f"L{first}: FAILED tests/a.py::t - boom",)
    assert f"L{first}: FAILED tests/a.py::t - boom\n" in excerpt.text


def test_a_cut_line_of_cjk_keeps_whole_characters() -> None:
    excerpt = excerpt_text("中" * 600 + "\n", ExcerptLimits(max_line_chars=500))
    assert excerpt.text == "中" * 500 + "[... 100 chars cut ...]\n"


def test_a_cut_never_leaves_a_lone_surrogate() -> None:
    pair = "\ud83d\ude00"
    excerpt = excerpt_text(pair * 300 + "\n", ExcerptLimits(max_line_chars=501))
    kept = excerpt.text.split("[...", 1)[0]
    assert kept == pair * 250
    assert excerpt.text == pair * 250 + "[... 100 chars cut ...]\n"


def test_cut_respects_surrogate_pairs_and_crlf() -> None:
    assert cut("ab\r\ncd", 3) == "ab"
    assert cut("ab\r\ncd", 4) == "ab\r\n"
    assert cut("a\ud83d\ude00b", 2) == "a"
    assert cut("a\ud83d\ude00b", 3) == "a\ud83d\ude00"
    assert cut("abc", 0) == ""
    assert cut("abc", 5) == "abc"


def test_emoji_and_cjk_survive_any_chunking() -> None:
    text = "".join(f"行 {i} 😀 façade\n" for i in range(50))
    whole = excerpt_text(text, SMALL)
    assert _chunked(text, [1] * len(text), SMALL) == whole
    assert whole.text.startswith("行 0 😀 façade\n")


# --- chunking invariance and bounds (properties) ----------------------------------------------

FAILURE_LINES = [
    "FAILED tests/test_x.py::test_y - AssertionError",
    "Traceback (most recent call last):",
    "ValueError: bad",
    "--- FAIL: TestX (0.01s)",
    "error[E0425]: cannot find value",
    "exit code 2",
    "=== 1 failed, 2 passed in 0.1s ===",
    "make: *** [all] Error 2",
]
line_text = st.one_of(
    st.sampled_from(FAILURE_LINES),
    st.text(alphabet="ab \r中😀\ud83dFAILexit", max_size=40),
)
log_text = st.lists(
    st.tuples(line_text, st.sampled_from(["\n", "\r\n", "\n", ""])),
    max_size=60,
).map(lambda parts: "".join(a + b for a, b in parts))
limits_strategy = st.builds(
    ExcerptLimits,
    max_chars=st.integers(0, 400),
    head_lines=st.integers(0, 4),
    tail_lines=st.integers(0, 5),
    max_failure_lines=st.integers(0, 4),
    max_line_chars=st.integers(1, 30),
)


@settings(max_examples=300)
@given(
    text=log_text,
    limits=limits_strategy,
    cuts=st.lists(st.integers(0, 50), max_size=20),
    failures=st.booleans(),
)
def test_any_chunking_of_a_text_gives_the_identical_excerpt(
    text: str,
    limits: ExcerptLimits,
    cuts: list[int],
    failures: bool,
) -> None:
    whole = excerpt_text(text, limits, failures=failures)
    assert _chunked(text, cuts, limits, failures=failures) == whole
    assert _chunked(text, [1] * len(text), limits, failures=failures) == whole


@settings(max_examples=300)
@given(text=log_text, limits=limits_strategy)
def test_the_excerpt_is_bounded_and_its_counts_are_exact(
    text: str,
    limits: ExcerptLimits,
) -> None:
    excerpt = excerpt_text(text, limits)
    assert len(excerpt.text) <= limits.max_chars
    assert excerpt.total_chars == len(text)
    assert excerpt.total_lines == _lines_of(text)
    assert excerpt.kept_lines + excerpt.omitted_lines == excerpt.total_lines
    assert len(excerpt.failures) <= limits.max_failure_lines
    assert len(excerpt.failed_tests) <= limits.max_failure_lines
    if not excerpt.truncated:
        assert excerpt.text == text
    pieces = text.split("\n")
    contents = [p.removesuffix("\r") for p in pieces[:-1]] + pieces[-1:]
    fits = (
        excerpt.total_lines <= limits.head_lines + limits.tail_lines
        and len(text) <= limits.max_chars
        and all(len(line) <= limits.max_line_chars for line in contents)
    )
    if fits:
        assert excerpt.text == text
        assert not excerpt.truncated


@settings(max_examples=100)
@given(count=st.integers(0, 300), limits=limits_strategy)
def test_numbered_lines_keep_their_exact_head_and_tail(count: int, limits: ExcerptLimits) -> None:
    roomy = ExcerptLimits(
        head_lines=limits.head_lines,
        tail_lines=limits.tail_lines,
        max_chars=100_000,
    )
    excerpt = excerpt_text(_numbered(count), roomy)
    shown = excerpt.text.splitlines()
    head = min(count, roomy.head_lines)
    tail = min(count - head, roomy.tail_lines)
    assert shown[:head] == [f"line {i}" for i in range(1, head + 1)]
    assert shown[len(shown) - tail :] == [f"line {i}" for i in range(count - tail + 1, count + 1)]
    assert excerpt.omitted_lines == count - head - tail


def test_chunks_larger_than_the_window_give_the_same_excerpt() -> None:
    text = _numbered(400_000)  # about 4.5 MB, taken in 1 MiB windows
    whole = excerpt_text(text, SMALL)
    assert _chunked(text, [65_536] * 80, SMALL) == whole
    assert whole.total_lines == 400_000
    assert whole.text.endswith("line 400000\n")


# --- memory --------------------------------------------------------------------------------


def test_a_100_mb_line_fed_in_64_kib_chunks_keeps_only_its_first_chars() -> None:
    piece = "x" * 65_536
    pieces = 1_600  # 100 MiB + 4 MiB
    builder = ExcerptBuilder()
    tracemalloc.start()
    try:
        for _ in range(pieces):
            builder.feed(piece)
        builder.feed("\nFAILED tests/x.py::t\n" + "tail\n" * 3)
        excerpt = builder.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024
    length = 65_536 * pieces
    assert excerpt.total_chars == length + len("\nFAILED tests/x.py::t\n") + 15
    assert excerpt.total_lines == 5
    assert excerpt.text.startswith("x" * 500 + f"[... {length - 500} chars cut ...]\n")
    assert excerpt.failed_tests == ("tests/x.py::t",)


def test_many_lines_keep_memory_bounded() -> None:
    chunk = _numbered(5_000)
    builder = ExcerptBuilder(ExcerptLimits(max_chars=16_384))
    tracemalloc.start()
    try:
        for _ in range(200):
            builder.feed(chunk)
        excerpt = builder.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024
    assert excerpt.total_lines == 1_000_000


# --- failure patterns ----------------------------------------------------------------------

POSITIVE: list[tuple[str, str | None, int | None]] = [
    # pytest
    ("FAILED tests/test_x.py::test_y - AssertionError: boom", "tests/test_x.py::test_y", None),
    ("FAILED tests/test_x.py::test_y[a b-1] - x", "tests/test_x.py::test_y[a b-1]", None),
    ("ERROR tests/test_x.py::test_z - fixture 'db' not found", "tests/test_x.py::test_z", None),
    ("ERROR tests/test_broken.py - ImportError: x", "tests/test_broken.py", None),
    ("tests/test_x.py::test_y FAILED                [ 50%]", "tests/test_x.py::test_y", None),
    ("tests/test_x.py::test_e ERROR                 [ 75%]", "tests/test_x.py::test_e", None),
    ("==== 1 failed, 3 passed, 2 warnings in 0.52s ====", None, None),
    ("2 passed, 1 error in 0.10s", None, None),
    ("E       AssertionError: assert 1 == 2", None, None),
    # unittest
    ("FAIL: test_x (pkg.mod.Case.test_x)", "pkg.mod.Case.test_x", None),
    ("FAIL: test_x (pkg.mod.Case)", "pkg.mod.Case.test_x", None),
    ("ERROR: test_y (pkg.mod.Case)", "pkg.mod.Case.test_y", None),
    ("FAILED (failures=1, errors=2)", None, None),
    ("ERROR: could not install packages", None, None),
    # python
    ("Traceback (most recent call last):", None, None),
    ("ValueError: invalid literal for int()", None, None),
    ("requests.exceptions.ConnectionError: refused", None, None),
    ("SomeException:", None, None),
    ("KeyError", None, None),
    ('Exception in thread "main" java.lang.NullPointerException', None, None),
    # go
    ("--- FAIL: TestParse (0.00s)", "TestParse", None),
    ("    --- FAIL: TestParse/empty (0.00s)", "TestParse/empty", None),
    ("FAIL\tgithub.com/x/y\t0.012s", None, None),
    ("panic: runtime error: index out of range", None, None),
    # jest, vitest
    ("  ✕ adds numbers (5 ms)", "adds numbers", None),
    ("  × adds numbers 12ms", "adds numbers", None),  # noqa: RUF001 - what vitest prints
    ("  ● Calculator › adds numbers", "Calculator › adds numbers", None),  # noqa: RUF001
    ("FAIL src/sum.test.js", None, None),
    # cargo, rust
    ("test parser::tests::empty ... FAILED", "parser::tests::empty", None),
    ("test result: FAILED. 3 passed; 1 failed; 0 ignored", None, None),
    ("thread 'main' panicked at src/main.rs:2:5:", None, None),
    ("error[E0425]: cannot find value `x` in this scope", None, None),
    # compilers
    ("main.c:3:5: error: expected ';' before 'return'", None, None),
    ("error: could not compile `demo`", None, None),
    ("src/a.ts(3,5): error TS2322: Type 'string' is not assignable", None, None),
    ("main.c:1:10: fatal error: nope.h: No such file or directory", None, None),
    # crashes and exit codes
    ("Segmentation fault (core dumped)", None, None),
    ("Killed", None, None),
    ("bash: line 1:  4242 Killed                  python job.py", None, None),
    ("Out of memory: Killed process 4242 (python)", None, None),
    ("Process finished with exit code 137", None, 137),
    ("the job exited with code 2", None, 2),
    ("Error: Process completed with exit code 1.", None, 1),
    ("subprocess returned non-zero exit status 3.", None, 3),
    ("make: *** [Makefile:12: all] Error 2", None, 2),
    ("make[1]: *** [build] Error 1", None, 1),
    ("exit status 1", None, 1),
    # a CI runner's timestamp in front
    ("2024-05-01T12:00:00.1234567Z FAILED tests/a.py::t - x", "tests/a.py::t", None),
]

NEAR_MISSES = [
    "PASSED tests/test_x.py::test_y",
    "tests/test_x.py::test_y PASSED [ 50%]",
    "==== 4 passed in 0.52s ====",
    "==================== FAILURES ====================",
    "0 failed, 3 passed",
    "3 failed requests were retried",
    "ok: test_x (pkg.mod.Case)",
    "    raise ValueError('bad')",
    "ErrorHandler: registered",
    "Errors: 0",
    "error_count=0 warnings=1",
    "onerror: ignore",
    "an error occurred but was handled",
    "--- PASS: TestParse (0.00s)",
    "ok  \tgithub.com/x/y\t0.012s",
    "  ✓ adds numbers (5 ms)",
    "  ● Console",
    "test parser::tests::empty ... ok",
    "test result: ok. 3 passed; 0 failed",
    "Killed 3 zombie processes",
    "the exit codes are documented",
    "FAILURES are expected here",
    "Segmentation is a marketing term",
    "exit code is unknown",
]


@pytest.mark.parametrize(("line", "test", "code"), POSITIVE)
def test_each_failure_pattern_is_found_in_the_middle_of_a_log(
    line: str,
    test: str | None,
    code: int | None,
) -> None:
    text, number = _log(line)
    expected = f"L{number}: {line}"
    for excerpt in (
        excerpt_text(text, SMALL),  # one chunk: the region scan
        _chunked(text, [len(x) + 1 for x in text.split("\n")], SMALL),  # one line per chunk
    ):
        assert excerpt.failures == (expected,)
        assert f"{expected}\n" in excerpt.text
        assert excerpt.failed_tests == (() if test is None else (test,))
        assert excerpt.exit_code == code


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_are_not_failures(line: str) -> None:
    text, _ = _log(line)
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.failures == ()
    assert excerpt.failed_tests == ()
    assert line not in excerpt.text


def test_an_exit_code_zero_is_recorded_but_is_no_failure() -> None:
    text, _ = _log("Process finished with exit code 0")
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.exit_code == 0
    assert excerpt.failures == ()


def test_the_last_stated_exit_code_wins() -> None:
    text, _ = _log("exit code 3", "step ok", "exited with code 0")
    assert excerpt_text(text, SMALL).exit_code == 0


def test_a_number_too_long_for_an_exit_code_is_ignored() -> None:
    text, _ = _log("exit code 123456789012")
    assert excerpt_text(text, SMALL).exit_code is None


def test_repeated_failure_lines_are_kept_once_with_the_first_line_number() -> None:
    text, first = _log("AssertionError: boom", "x", "AssertionError: boom", "AssertionError: boom")
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.failures == (f"L{first}: AssertionError: boom",)
    assert excerpt.text.count("AssertionError: boom") == 1


def test_failure_lines_beyond_the_cap_are_counted_in_a_marker() -> None:
    lines = [f"FAILED tests/t.py::test_{i}" for i in range(12)]
    text, first = _log(*lines)
    limits = ExcerptLimits(head_lines=3, tail_lines=4, max_failure_lines=5)
    excerpt = excerpt_text(text, limits)
    assert excerpt.failures == tuple(f"L{first + i}: {lines[i]}" for i in range(5))
    assert excerpt.failed_tests == tuple(f"tests/t.py::test_{i}" for i in range(5))
    assert "[... 7 more failure lines not shown ...]\n" in excerpt.text
    gap = excerpt.omitted_lines
    assert excerpt.kept_lines == 3 + 5 + 4
    assert gap == excerpt.total_lines - 12


def test_overflow_failures_shown_in_the_tail_are_not_counted_as_hidden() -> None:
    lines = [f"FAILED tests/t.py::test_{i}" for i in range(8)]
    text, _ = _log(*lines, after=0)
    limits = ExcerptLimits(head_lines=3, tail_lines=2, max_failure_lines=3)
    excerpt = excerpt_text(text, limits)
    # 3 kept, 2 more in the tail (shown there), 3 hidden
    assert "[... 3 more failure lines not shown ...]\n" in excerpt.text
    assert excerpt.text.endswith(f"{lines[6]}\n{lines[7]}\n")


def test_failures_in_head_and_tail_are_listed_but_shown_once() -> None:
    text = "FAILED tests/a.py::first\n" + _numbered(50) + "FAILED tests/a.py::last\n"
    excerpt = excerpt_text(text, SMALL)
    assert excerpt.failures == (
        "L1: FAILED tests/a.py::first",
        "L52: FAILED tests/a.py::last",
    )
    assert excerpt.text.count("tests/a.py::first") == 1
    assert excerpt.text.count("tests/a.py::last") == 1
    assert "L1:" not in excerpt.text
    assert "L52:" not in excerpt.text


def test_failure_lines_are_cut_like_any_line() -> None:
    line = "ValueError: " + "v" * 100
    text, first = _log(line)
    limits = ExcerptLimits(head_lines=3, tail_lines=4, max_line_chars=20)
    excerpt = excerpt_text(text, limits)
    assert excerpt.failures == (f"L{first}: {line[:20]}[... {len(line) - 20} chars cut ...]",)


def test_patterns_look_only_at_the_first_chars_of_a_long_line() -> None:
    limits = ExcerptLimits(head_lines=3, tail_lines=4, max_line_chars=10)
    late = "." * 25 + " error: late"  # the trigger begins after 2 * 10 chars
    early = "." * 5 + " error: early" + "." * 50
    assert excerpt_text(_log(late)[0], limits).failures == ()
    assert len(excerpt_text(_log(early)[0], limits).failures) == 1


def test_failure_sections_shrink_with_the_rest_to_fit_max_chars() -> None:
    lines = [f"FAILED tests/t.py::test_{i} - AssertionError" for i in range(30)]
    text, _ = _log(*lines, before=50, after=50)
    limits = ExcerptLimits(max_chars=600, head_lines=5, tail_lines=5, max_failure_lines=30)
    excerpt = excerpt_text(text, limits)
    assert len(excerpt.text) <= 600
    shown = len(re.findall(r"^L\d+: FAILED", excerpt.text, re.MULTILINE))
    assert 0 < shown < 30
    assert f"[... {30 - shown} more failure lines not shown ...]" in excerpt.text
    assert excerpt.kept_lines + excerpt.omitted_lines == excerpt.total_lines
