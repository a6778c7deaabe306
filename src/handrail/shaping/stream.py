"""Text streams: a large tool result read incrementally and shaped into a bounded excerpt.

Owns reading a large text (a generator, a file, a subprocess pipe) chunk by chunk:
incremental decoding, blocking reads moved off the event loop, and closing the source
once, however reading ends. It never holds the whole text: `shape_stream` keeps only
what an ExcerptBuilder keeps, and hands every chunk to a sink for a capped raw copy.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import inspect
import os
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
)
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO, TypedDict, Unpack, runtime_checkable

from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import Excerpt, ExcerptBuilder, ExcerptLimits

__all__ = ["StreamKind", "TextStream", "shape_stream"]

_BATCH_ITEMS = 1024
"""Items of a blocking iterable pulled per trip to a worker thread (bounded by chunk_size)."""

_Item = str | bytes
_Pull = Callable[[], Awaitable[list[_Item] | None]]


class StreamKind(StrEnum):
    """What a stream holds, which decides how it is shaped."""

    TEXT = "text"
    LOG = "log"
    """Output of a build, a test run or a program: failure lines are extracted too."""


@runtime_checkable
class _Readable(Protocol):
    """A file-like source: binary or text, read by size, closed once."""

    def read(self, size: int, /) -> _Item: ...  # pragma: no cover - a protocol

    def close(self) -> None: ...  # pragma: no cover - a protocol


class _Options(TypedDict, total=False):
    encoding: str
    media_type: str
    kind: StreamKind
    chunk_size: int
    on_close: Callable[[], object] | None


_Source = (
    _Item
    | Iterable[_Item]
    | AsyncIterable[_Item]
    | BinaryIO
    | TextIO
    | asyncio.StreamReader
    | _Readable
)
"""A str or bytes is one chunk; anything else is read piece by piece."""


class TextStream:
    """A large text result a tool returns instead of a str; read incrementally, never whole.

    The stream owns its source: reading it to the end, failing, or being cancelled closes
    the source and calls `on_close` exactly once. A stream is read once. Blocking sources
    (files, sync iterables) are read in a worker thread; a read in flight when the stream
    is cancelled finishes there, and the source is closed right after it.
    """

    __slots__ = (
        "_process",
        "_source",
        "_used",
        "chunk_size",
        "encoding",
        "kind",
        "media_type",
        "on_close",
    )

    def __init__(
        self,
        source: _Source,
        *,
        encoding: str = "utf-8",
        media_type: str = "text/plain",
        kind: StreamKind = StreamKind.TEXT,
        chunk_size: int = 64 * 1024,
        on_close: Callable[[], object] | None = None,
    ) -> None:
        try:
            codecs.getincrementaldecoder(encoding)
        except LookupError as exc:
            raise ConfigurationError(f"unknown text encoding {encoding!r}") from exc
        if chunk_size < 1:
            raise ConfigurationError("a TextStream's chunk_size is at least 1")
        if on_close is not None and inspect.iscoroutinefunction(on_close):
            raise ConfigurationError("on_close is called synchronously; it cannot be async")
        self._source = source
        self.encoding = encoding
        self.media_type = media_type
        self.kind = kind
        self.chunk_size = chunk_size
        self.on_close = on_close
        self._process: asyncio.subprocess.Process | None = None
        self._used = False

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], **kw: Unpack[_Options]) -> TextStream:
        """The text of a file; it is opened on the first read, in a worker thread.

        A missing or unreadable path fails here, where the tool can still report it.
        """
        if not Path(path).is_file():
            raise FileNotFoundError(errno.ENOENT, "not a file", os.fspath(path))
        return cls(_PathReader(path), **kw)

    @classmethod
    def from_process(
        cls,
        process: asyncio.subprocess.Process,
        **kw: Unpack[_Options],
    ) -> TextStream:
        """The standard output of a process started with `stdout=PIPE`.

        If reading stops before the end of the output (an error, a cancellation), a process
        still running is killed: nobody reads its pipe any more. Waiting for it stays with
        the caller.
        """
        if process.stdout is None:
            raise ConfigurationError("the process was started without stdout=PIPE")
        stream = cls(process.stdout, **kw)
        stream._process = process
        return stream

    async def chunks(self) -> AsyncGenerator[str, None]:
        """The text, chunk by chunk; use `contextlib.aclosing` to close it when leaving early.

        Bytes are decoded incrementally (a character split between two reads is never
        split in the text; invalid bytes become U+FFFD).
        """
        if self._used:
            raise ConfigurationError("a TextStream can be read only once")
        self._used = True
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="replace")
        pull, close = self._reader()
        done = False
        try:
            while (items := await pull()) is not None:
                for item in items:
                    if isinstance(item, str):
                        text = decoder.decode(b"", final=True) + item
                        decoder.reset()
                    elif isinstance(item, bytes):
                        text = decoder.decode(item)
                    else:
                        raise ConfigurationError(_not_text(item))
                    if text:
                        yield text
            if rest := decoder.decode(b"", final=True):
                yield rest
            done = True
        finally:
            await self._release(close, done=done)

    async def aclose(self) -> None:
        """Close a stream that will not be read (a no-op once it has been read)."""
        if self._used:
            return
        self._used = True
        _, close = self._reader()
        await self._release(close, done=False)

    # --- sources ---------------------------------------------------------------------------

    def _reader(self) -> tuple[_Pull, Callable[[], Awaitable[None]]]:
        """How to pull the next items of the source, and how to close it."""
        source = self._source
        size = self.chunk_size
        if isinstance(source, str | bytes | bytearray):
            return _in_memory(iter((source,)))
        if isinstance(source, asyncio.StreamReader):
            return _stream_reader(source, size)
        if isinstance(source, _Readable):
            blocking = _Blocking(_read_file(source, size), source.close)
            return blocking.pull, blocking.aclose
        if isinstance(source, AsyncIterable):
            return _async_items(source)
        if isinstance(source, list | tuple):
            return _in_memory(iter(source))
        iterator = iter(source)
        close = getattr(iterator, "close", None)
        blocking = _Blocking(_read_batch(iterator, size), close if callable(close) else None)
        return blocking.pull, blocking.aclose

    async def _release(self, close: Callable[[], Awaitable[None]], *, done: bool) -> None:
        """Close the source, stop an abandoned process, then call on_close (reached once)."""
        try:
            await close()
        finally:
            try:
                process = self._process
                if not done and process is not None and process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            finally:
                if self.on_close is not None:
                    self.on_close()


async def shape_stream(
    stream: TextStream,
    limits: ExcerptLimits | None = None,
    *,
    sink: Callable[[bytes], None] | None = None,
) -> Excerpt:
    """Read a stream to its end into a bounded Excerpt (failure lines too for a LOG stream).

    `sink` receives every chunk encoded as UTF-8, in order (a caller spools a capped raw
    copy from it). Memory stays bounded by the limits and the chunk size, whatever the
    size of the input.
    """
    builder = ExcerptBuilder(limits, failures=stream.kind is StreamKind.LOG)
    async with contextlib.aclosing(stream.chunks()) as chunks:
        async for chunk in chunks:
            if sink is not None:
                sink(chunk.encode("utf-8", errors="replace"))
            builder.feed(chunk)
    return builder.finish()


# --- readers ----------------------------------------------------------------------------------


async def _nothing() -> None:
    return None


def _in_memory(items: Iterator[_Item]) -> tuple[_Pull, Callable[[], Awaitable[None]]]:
    async def pull() -> list[_Item] | None:
        item = next(items, None)
        return None if item is None else [item]

    return pull, _nothing


def _stream_reader(
    reader: asyncio.StreamReader,
    size: int,
) -> tuple[_Pull, Callable[[], Awaitable[None]]]:
    async def pull() -> list[_Item] | None:
        data = await reader.read(size)
        return [data] if data else None

    return pull, _nothing


def _async_items(source: AsyncIterable[_Item]) -> tuple[_Pull, Callable[[], Awaitable[None]]]:
    iterator = aiter(source)

    async def pull() -> list[_Item] | None:
        try:
            return [await anext(iterator)]
        except StopAsyncIteration:
            return None

    async def close() -> None:
        aclose = getattr(iterator, "aclose", None)
        if callable(aclose):
            # Shielded: a cancelled caller must not leave the source half closed.
            await asyncio.shield(aclose())

    return pull, close


def _read_file(source: _Readable, size: int) -> Callable[[], list[_Item] | None]:
    def read() -> list[_Item] | None:
        data = source.read(size)
        return [data] if data else None

    return read


def _read_batch(iterator: Iterator[_Item], size: int) -> Callable[[], list[_Item] | None]:
    """Pull items until about `size` chars or bytes; runs of one type are joined."""

    def read() -> list[_Item] | None:
        runs: list[list[str] | list[bytes]] = []
        total = 0
        for count, item in enumerate(iterator, 1):
            last = runs[-1] if runs else None
            if isinstance(item, str):
                if last and isinstance(last[0], str):
                    last.append(item)
                else:
                    runs.append([item])
            elif isinstance(item, bytes):
                if last and isinstance(last[0], bytes):
                    last.append(item)
                else:
                    runs.append([item])
            else:
                raise ConfigurationError(_not_text(item))
            total += len(item)
            if total >= size or count >= _BATCH_ITEMS:
                break
        return [_join(run) for run in runs] or None

    return read


def _join(run: list[str] | list[bytes]) -> _Item:
    if len(run) == 1:
        return run[0]
    if isinstance(run[0], str):
        return "".join(run)
    return b"".join(run)


def _not_text(item: object) -> str:
    return f"a TextStream source gave {type(item).__name__}, not str or bytes"


class _Blocking:
    """A blocking source read in worker threads, closed once and never during a read."""

    def __init__(
        self,
        read: Callable[[], list[_Item] | None],
        close: Callable[[], object] | None,
    ) -> None:
        self._read = read
        self._close = close
        self._lock = threading.Lock()
        self._busy = False
        self._closing = False

    async def pull(self) -> list[_Item] | None:
        return await asyncio.to_thread(self._pull)

    def _pull(self) -> list[_Item] | None:
        with self._lock:
            if self._closing:
                return None
            self._busy = True
        try:
            return self._read()
        finally:
            with self._lock:
                self._busy = False
                deferred = self._closing
            if deferred:
                # The reader was cancelled while this read ran: close now that it is over.
                self._close_source()

    async def aclose(self) -> None:
        with self._lock:
            self._closing = True
            if self._busy:
                return
        self._close_source()

    def _close_source(self) -> None:
        if self._close is not None:
            self._close()


class _PathReader:
    """A file opened on its first read (in the worker thread), so nothing leaks unread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = path
        self._file: BinaryIO | None = None
        self._closed = False

    def read(self, size: int, /) -> bytes:
        if self._closed:
            return b""
        if self._file is None:
            self._file = open(self._path, "rb")  # noqa: PTH123, SIM115 - closed by close()
        return self._file.read(size)

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
