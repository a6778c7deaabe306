"""An HTTP upstream that answers with a gzip bomb is refused unread (`oversize`).

The proxy bounds each HTTP body an upstream sends, but it counted bytes as sent: a
51 KB gzip body that decodes to 50 MB passed a 1 MiB bound and was decoded whole.
Now no compressed body is asked for (`Accept-Encoding: identity`) and one sent anyway
ends the exchange before it is decoded. The server below ignores what it is asked.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import anyio
import pytest

from handrail.mcp.upstream import HttpUpstream, Upstream, UpstreamError

pytestmark = pytest.mark.anyio

WAIT = 60.0
DECODED = 50 * 1024 * 1024
BOMB = gzip.compress(b"[" + b" " * DECODED + b"]", 9)


class _Bomb(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.asked.append(self.headers.get("Accept-Encoding", ""))
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(BOMB)))
        self.end_headers()
        self.wfile.write(BOMB)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        del format, args


@pytest.fixture
def bomb_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Bomb)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


async def test_a_gzip_bomb_is_oversize_and_never_decoded(bomb_url: str) -> None:
    _Bomb.asked.clear()
    upstream = Upstream(HttpUpstream(url=bomb_url), max_message_bytes=1024 * 1024)
    try:
        with anyio.fail_after(WAIT), pytest.raises(UpstreamError) as failed:
            await upstream.list_tools(timeout=WAIT)
    finally:
        await upstream.aclose()

    assert len(BOMB) < 1024 * 1024 < DECODED
    assert failed.value.reason in {"oversize", "unavailable"}
    assert "compressed" in failed.value.detail
    assert _Bomb.asked
    assert set(_Bomb.asked) == {"identity"}
