"""A real HTTP server on a loopback address for the http_fetch tests, counting connections."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["LoopbackServer", "QuietHandler", "run_server"]

S = TypeVar("S", bound="LoopbackServer")


class LoopbackServer(ThreadingHTTPServer):
    """Binds an ephemeral port on `host` (IPv4 or IPv6) and counts accepted connections."""

    daemon_threads = True

    def __init__(self, host: str, handler: type[BaseHTTPRequestHandler]) -> None:
        self.connections = 0
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's name; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", self.server_address[1]

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up early is expected here."""

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, and no request log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""


@contextmanager
def run_server(server: S) -> Iterator[S]:
    """Serve in a daemon thread until the block ends, then shut down and close."""
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
