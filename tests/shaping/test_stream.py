"""Text streams: any source read incrementally, decoded safely, closed once, shaped bounded."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import ExcerptLimits, excerpt_text
from handrail.shaping.stream import StreamKind, TextStream, _Blocking, _PathReader, shape_stream

pytestmark = pytest.mark.anyio

TEXT = "".join(f"línea {i} 中文 😀\n" for i in range(200))
SMALL = ExcerptLimits(head_lines=2, tail_lines=3)
WAIT = 10.0
"""Upper bound of every wait on another thread or process, in seconds."""


async def _read(stream: TextStream) -> list[str]:
    async with contextlib.aclosing(stream.chunks()) as chunks:
        return [chunk async for chunk in chunks]


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


class _Closes:
    """Counts on_close calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


# --- sources -------------------------------------------------------------------------------


async def test_a_sync_iterable_of_str_is_read_in_order() -> None:
    def lines() -> Iterator[str]:
        yield from TEXT.splitlines(keepends=True)

    assert "".join(await _read(TextStream(lines()))) == TEXT


@pytest.mark.parametrize("size", [1, 2, 3, 5, 4096])
async def test_multibyte_characters_split_across_chunks_are_decoded_whole(size: int) -> None:
    pieces = _pieces(TEXT.encode(), size)
    chunks = await _read(TextStream(iter(pieces)))
    assert "".join(chunks) == TEXT
    assert "\ufffd" not in "".join(chunks)


async def test_an_async_iterable_of_bytes_is_read_in_order() -> None:
    async def produce() -> AsyncIterator[bytes]:
        for piece in _pieces(TEXT.encode(), 7):
            yield piece

    assert "".join(await _read(TextStream(produce()))) == TEXT


async def test_an_async_iterable_without_aclose_is_read() -> None:
    class Counter:
        def __init__(self) -> None:
            self.left = 3

        def __aiter__(self) -> Counter:
            return self

        async def __anext__(self) -> str:
            if not self.left:
                raise StopAsyncIteration
            self.left -= 1
            return "x\n"

    assert await _read(TextStream(Counter())) == ["x\n"] * 3


async def test_in_memory_sources_are_read_without_threads() -> None:
    assert await _read(TextStream("just text")) == ["just text"]
    assert await _read(TextStream("bytes é".encode())) == ["bytes é"]
    assert await _read(TextStream(["a", b"b", "c"])) == ["a", "b", "c"]
    assert await _read(TextStream((b"x", b"y"))) == ["x", "y"]


async def test_a_binary_file_is_read_in_chunks_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(TEXT.encode())
    with path.open("rb") as handle:
        chunks = await _read(TextStream(handle, chunk_size=100))
        assert handle.closed
    assert "".join(chunks) == TEXT
    assert len(chunks) > 10


async def test_a_text_file_is_read_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text(TEXT, encoding="utf-16")
    with path.open(encoding="utf-16") as handle:
        chunks = await _read(TextStream(handle, chunk_size=64))
        assert handle.closed
    assert "".join(chunks) == TEXT
    assert max(map(len, chunks)) <= 64


async def test_a_stream_in_another_encoding_is_decoded() -> None:
    data = TEXT.encode("utf-16")
    assert "".join(await _read(TextStream(io.BytesIO(data), encoding="utf-16"))) == TEXT


async def test_from_path_opens_the_file_only_when_read(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(TEXT.encode())
    stream = TextStream.from_path(path, kind=StreamKind.LOG, chunk_size=512)
    assert stream.kind is StreamKind.LOG
    assert stream.chunk_size == 512
    path.write_bytes(b"changed\n")  # not opened yet: the new content is read
    assert await _read(stream) == ["changed\n"]


async def test_from_path_refuses_a_missing_file_or_a_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        TextStream.from_path(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError):
        TextStream.from_path(tmp_path)


def test_the_path_reader_can_be_closed_unopened_and_reads_nothing_after() -> None:
    reader = _PathReader(__file__)
    reader.close()
    assert reader.read(10) == b""


async def test_invalid_utf8_is_replaced_not_raised() -> None:
    chunks = await _read(TextStream([b"ok \xff\xfe bad\n", b"cut \xe4\xb8"]))
    assert "".join(chunks) == "ok \ufffd\ufffd bad\ncut \ufffd"


async def test_single_bytes_of_a_character_from_an_async_source_give_no_empty_chunks() -> None:
    async def produce() -> AsyncIterator[bytes]:
        for byte in "中a".encode():
            yield bytes([byte])

    assert await _read(TextStream(produce())) == ["中", "a"]


async def test_a_non_text_item_of_an_async_source_is_refused() -> None:
    async def produce() -> AsyncIterator[object]:
        yield 3

    with pytest.raises(ConfigurationError):
        await _read(TextStream(produce()))  # type: ignore[arg-type]


async def test_a_str_item_after_a_partial_character_keeps_the_order() -> None:
    chunks = await _read(TextStream([b"a\xe4\xb8", "b"]))
    assert "".join(chunks) == "a\ufffdb"


async def test_a_blocking_iterable_is_pulled_in_batches() -> None:
    items = [f"{i}\n" for i in range(5000)]
    chunks = await _read(TextStream(iter(items)))
    assert "".join(chunks) == "".join(items)
    assert 1 < len(chunks) < 5000


async def test_a_source_item_that_is_not_text_is_refused_and_still_closes() -> None:
    closes = _Closes()
    stream = TextStream(iter(["a", 3]), on_close=closes)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await _read(stream)
    assert closes.calls == 1


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        TextStream([], encoding="no-such-encoding")
    with pytest.raises(ConfigurationError):
        TextStream([], chunk_size=0)

    async def later() -> None:
        return None

    with pytest.raises(ConfigurationError):
        TextStream([], on_close=later)


# --- subprocesses --------------------------------------------------------------------------

PRINT_LOTS = (
    "import sys\n"
    "for i in range(100_000):\n"
    "    print(f'building unit {i} ok é')\n"
    "print('FAILED tests/test_a.py::test_b - AssertionError')\n"
    "print('Process finished with exit code 1')\n"
)


async def test_a_subprocess_stdout_is_shaped_while_it_runs() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PRINT_LOTS,
        stdout=asyncio.subprocess.PIPE,
    )
    closes = _Closes()
    stream = TextStream.from_process(process, kind=StreamKind.LOG, on_close=closes)
    excerpt = await shape_stream(stream, SMALL)
    assert await asyncio.wait_for(process.wait(), WAIT) == 0
    assert excerpt.total_lines == 100_002
    assert excerpt.failed_tests == ("tests/test_a.py::test_b",)
    assert excerpt.exit_code == 1
    assert excerpt.text.startswith("building unit 0 ok é\nbuilding unit 1 ok é\n[... ")
    assert closes.calls == 1


async def test_an_abandoned_subprocess_is_killed() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "while True: print('x' * 100, flush=True)",
        stdout=asyncio.subprocess.PIPE,
    )
    stream = TextStream.from_process(process)
    async with contextlib.aclosing(stream.chunks()) as chunks:
        async for _ in chunks:
            break
    assert await asyncio.wait_for(process.wait(), WAIT) != 0


async def test_a_finished_subprocess_is_not_killed_when_its_stream_closes() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "print('done')",
        stdout=asyncio.subprocess.PIPE,
    )
    assert await asyncio.wait_for(process.wait(), WAIT) == 0
    stream = TextStream.from_process(process)
    await stream.aclose()
    assert process.returncode == 0


async def test_a_process_without_a_stdout_pipe_is_refused() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "pass",
        stdout=asyncio.subprocess.DEVNULL,
    )
    with pytest.raises(ConfigurationError):
        TextStream.from_process(process)
    assert await asyncio.wait_for(process.wait(), WAIT) == 0


# --- closing and consumption ---------------------------------------------------------------


async def test_a_source_is_closed_when_it_is_exhausted() -> None:
    closed = _Closes()
    closes = _Closes()

    def lines() -> Iterator[str]:
        try:
            yield "a\n"
        finally:
            closed()

    await _read(TextStream(lines(), on_close=closes))
    assert (closed.calls, closes.calls) == (1, 1)


async def test_a_source_that_fails_is_closed_and_the_error_propagates() -> None:
    closes = _Closes()

    async def broken() -> AsyncIterator[str]:
        yield "a\n"
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        await shape_stream(TextStream(broken(), on_close=closes))
    assert closes.calls == 1


async def test_a_consumer_that_fails_closes_the_source(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(TEXT.encode())
    closes = _Closes()

    def sink(data: bytes) -> None:
        raise RuntimeError("spool full")

    with path.open("rb") as handle:
        stream = TextStream(handle, on_close=closes)
        with pytest.raises(RuntimeError, match="spool full"):
            await shape_stream(stream, sink=sink)
        assert handle.closed
    assert closes.calls == 1


async def test_a_cancelled_reader_closes_an_async_source() -> None:
    closes = _Closes()
    started = asyncio.Event()
    finalized = asyncio.Event()

    async def hangs() -> AsyncIterator[str]:
        try:
            yield "first\n"
            await asyncio.Event().wait()  # never set
            yield "never\n"  # pragma: no cover - never reached
        finally:
            finalized.set()

    task = asyncio.create_task(
        shape_stream(TextStream(hangs(), on_close=closes), sink=lambda _: started.set())
    )
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finalized.is_set()
    assert closes.calls == 1


async def test_a_cancelled_blocking_read_closes_its_source_once_the_read_returns() -> None:
    closes = _Closes()
    waiting = threading.Event()
    release = threading.Event()
    closed = threading.Event()

    def blocks() -> Iterator[str]:
        try:
            yield "first\n"
            waiting.set()
            release.wait(WAIT)
            yield "second\n"
            yield "never read\n"  # pragma: no cover - the stream is closed before
        finally:
            closed.set()

    stream = TextStream(blocks(), on_close=closes, chunk_size=1)
    task = asyncio.create_task(shape_stream(stream))
    assert await asyncio.to_thread(waiting.wait, WAIT)  # the worker is inside a read
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closes.calls == 1
    assert not closed.is_set()  # not while the read runs
    release.set()
    assert await asyncio.to_thread(closed.wait, WAIT)


async def test_a_blocking_source_closed_while_no_read_runs_is_never_read_again() -> None:
    reads: list[int] = []
    closes = _Closes()

    def read() -> list[str | bytes] | None:
        reads.append(1)
        return ["x"]

    blocking = _Blocking(read, closes)
    await blocking.aclose()
    assert await blocking.pull() is None
    assert (reads, closes.calls) == ([], 1)


async def test_a_stream_is_read_only_once() -> None:
    stream = TextStream(["a"])
    assert await _read(stream) == ["a"]
    with pytest.raises(ConfigurationError):
        await _read(stream)
    await stream.aclose()  # a no-op once read


async def test_closing_an_unread_stream_closes_its_source_and_forbids_reading(
    tmp_path: Path,
) -> None:
    closes = _Closes()
    path = tmp_path / "log.txt"
    path.write_bytes(b"x\n")
    with path.open("rb") as handle:
        stream = TextStream(handle, on_close=closes)
        await stream.aclose()
        await stream.aclose()
        assert handle.closed
    assert closes.calls == 1
    with pytest.raises(ConfigurationError):
        await _read(stream)


# --- shaping -------------------------------------------------------------------------------


async def test_shaping_a_stream_equals_shaping_the_whole_text() -> None:
    stream = TextStream(iter(_pieces(TEXT.encode(), 13)))
    assert await shape_stream(stream, SMALL) == excerpt_text(TEXT, SMALL, failures=False)


async def test_a_log_stream_extracts_failures_and_a_text_stream_does_not() -> None:
    log = "ok\n" * 20 + "FAILED tests/a.py::t - boom\n" + "ok\n" * 20
    as_log = await shape_stream(TextStream([log], kind=StreamKind.LOG), SMALL)
    as_text = await shape_stream(TextStream([log]), SMALL)
    assert as_log.failed_tests == ("tests/a.py::t",)
    assert "L21: FAILED tests/a.py::t - boom" in as_log.text
    assert as_text.failures == ()


async def test_the_sink_receives_exactly_the_text_as_utf8() -> None:
    received: list[bytes] = []
    data = TEXT.encode()
    await shape_stream(TextStream(iter(_pieces(data, 5))), SMALL, sink=received.append)
    assert b"".join(received) == data


async def test_the_sink_receives_replacement_characters_for_invalid_bytes() -> None:
    received: list[bytes] = []
    await shape_stream(TextStream([b"a\xffb"]), sink=received.append)
    assert b"".join(received) == "a\ufffdb".encode()
