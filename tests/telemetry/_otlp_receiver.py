"""An OTLP/HTTP receiver on 127.0.0.1 for tests: it decodes what exporters send it.

Answers POST /v1/traces and /v1/metrics (protobuf, optionally gzip) with 200 and keeps
the decoded `ExportTraceServiceRequest` / `ExportMetricsServiceRequest` and the request
headers. Runs in a thread of its own until `close`.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


class OtlpReceiver:
    """What was exported to it: trace requests, metric requests, and their headers."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                answer = receiver.receive(self.path, body, dict(self.headers.items()))
                if answer is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet: the test reads what was received, not a log."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def receive(self, path: str, body: bytes, headers: dict[str, str]) -> bytes | None:
        with self._lock:
            self.headers.append({key.lower(): value for key, value in headers.items()})
            if path == "/v1/traces":
                self.traces.append(ExportTraceServiceRequest.FromString(body))
                return bytes(ExportTraceServiceResponse().SerializeToString())
            if path == "/v1/metrics":
                self.metrics.append(ExportMetricsServiceRequest.FromString(body))
                return bytes(ExportMetricsServiceResponse().SerializeToString())
            self.unexpected.append(path)
            return None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=30)


def attributes(pairs: Any) -> dict[str, object]:
    """OTLP attributes (`repeated KeyValue`) as a plain dict."""
    found: dict[str, object] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        found[pair.key] = _value(pair.value)
    return found


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)
