"""Reading a response body within bounds: content types, decompression and charsets.

Owns the byte-level side of `http_fetch`: which media types are returned as text, a
gzip/deflate decoder that never produces more than it is asked for (so a compression
bomb costs at most the byte budget), and decoding to text with replacement characters,
from the declared charset, else UTF-8, else a detected one. It never does network I/O.
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections.abc import Iterable

import charset_normalizer

__all__ = [
    "BoundedDecoder",
    "UnsupportedEncodingError",
    "check_media_patterns",
    "decode_text",
    "media_allowed",
    "parse_content_type",
]

_TOKEN = r"[a-z0-9!#$&^_.+-]+"  # noqa: S105 - an RFC 9110 token, not a password
_MEDIA = re.compile(rf"{_TOKEN}/{_TOKEN}")
_PATTERN = re.compile(rf"\*/\*|{_TOKEN}/\*|{_TOKEN}/\*\+{_TOKEN}|{_TOKEN}/{_TOKEN}")
_CHARSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,39}")
_DETECT_BYTES = 64 * 1024
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_AUTO_WBITS = 32 + zlib.MAX_WBITS  # a zlib or gzip header, whichever is there


class UnsupportedEncodingError(ValueError):
    """A Content-Encoding this reader does not decode, or data that does not decode."""


def parse_content_type(header: str | None) -> tuple[str | None, str | None]:
    """(media type in lower case, charset parameter) of a Content-Type header."""
    if not header:
        return None, None
    media, *params = header.split(";")
    media = media.strip().lower()
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip('"').strip() or None
    return (media if _MEDIA.fullmatch(media) else None), charset


def check_media_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """The patterns in lower case; ValueError for one that is not a media type pattern."""
    checked = tuple(pattern.strip().lower() for pattern in patterns)
    for pattern in checked:
        if not _PATTERN.fullmatch(pattern):
            raise ValueError(pattern)
    return checked


def media_allowed(media: str | None, patterns: Iterable[str]) -> bool:
    """True when the media type matches `type/sub`, `type/*`, `type/*+suffix` or `*/*`."""
    if media is None:
        return False
    kind, _, sub = media.partition("/")
    for pattern in patterns:
        want_kind, _, want_sub = pattern.partition("/")
        if pattern in {"*/*", media}:
            return True
        if want_kind != kind:
            continue
        if want_sub == "*" or (want_sub.startswith("*+") and sub.endswith(want_sub[1:])):
            return True
    return False


class BoundedDecoder:
    """Content-Encoding decoding (identity, gzip, deflate) that never exceeds a limit.

    `feed(data, room)` returns at most `room` decoded bytes and whether more would have
    followed; zlib's `max_length` keeps a small compressed input from expanding in
    memory beyond the limit.
    """

    def __init__(self, content_encoding: str | None) -> None:
        name = (content_encoding or "identity").strip().lower()
        if name in {"identity", ""}:
            self._wbits: int | None = None
        elif name in {"gzip", "x-gzip"}:
            self._wbits = _GZIP_WBITS
        elif name == "deflate":
            self._wbits = _AUTO_WBITS
        else:
            raise UnsupportedEncodingError(name)
        self._inflater = None if self._wbits is None else zlib.decompressobj(self._wbits)

    def feed(self, data: bytes, room: int) -> tuple[bytes, bool]:
        """(up to `room` decoded bytes, True when the data decodes to more than that)."""
        if self._inflater is None or self._wbits is None:
            return data[:room], len(data) > room
        out = bytearray()
        try:
            while data:
                out += self._inflater.decompress(data, room - len(out) + 1)
                if len(out) > room:
                    return bytes(out[:room]), True
                if not self._inflater.eof:
                    break
                # Another gzip member may follow the one that just ended.
                data = self._inflater.unused_data
                self._inflater = zlib.decompressobj(self._wbits)
        except zlib.error as exc:
            raise UnsupportedEncodingError(str(exc)) from None
        return bytes(out), False


def _text_codec(name: str | None) -> str | None:
    """The Python codec for a declared charset, if it is a text encoding we know."""
    if name is None or not _CHARSET.fullmatch(name):
        return None
    try:
        codec = codecs.lookup(name)
        # Refuses codecs that are not text encodings (zlib, base64, ...): the check runs
        # only for non-empty input. A decoding error still means a text encoding.
        b"a".decode(codec.name)
    except LookupError:
        return None
    except UnicodeError:
        pass
    return codec.name


def _is_utf8(data: bytes, *, complete: bool) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=complete)
    except UnicodeDecodeError:
        return False
    return True


def decode_text(data: bytes, declared: str | None, *, complete: bool) -> tuple[str, str]:
    """(text, codec used): the declared charset, else UTF-8, else a detected one.

    Undecodable bytes become U+FFFD. When the body was cut (`complete` False) a
    character split by the cut is dropped rather than replaced.
    """
    encoding = _text_codec(declared)
    if encoding is None:
        if _is_utf8(data, complete=complete):
            encoding = "utf-8"
        else:
            best = charset_normalizer.from_bytes(data[:_DETECT_BYTES]).best()
            encoding = _text_codec(best.encoding if best else None) or "utf-8"
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    return decoder.decode(data, final=complete), encoding
