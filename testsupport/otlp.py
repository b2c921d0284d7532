"""A real OTLP/HTTP trace receiver on loopback, for tests: what a collector would be sent.

It serves `POST /v1/traces` (stdlib HTTP server in a thread), decodes each
`ExportTraceServiceRequest` with `opentelemetry-proto`, keeps its spans (with their resource's
attributes and the request's headers) and answers as a collector does. A test points
`$OTEL_EXPORTER_OTLP_ENDPOINT` at `url`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from testsupport.threaded_http import serving_in_thread

#: Span kinds by their number in the protocol.
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def value(any_value: AnyValue) -> Any:
    """An attribute's value as Python (lists for arrays)."""
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    return getattr(any_value, which) if which else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in hex; no parent: "")."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    duration_ns: int


def _decoded(span: Span, resource: dict[str, Any]) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        kind=KINDS[span.kind],
        attributes=attributes(span.attributes),
        resource=resource,
        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
        events=[(event.name, attributes(event.attributes)) for event in span.events],
        status_code=span.status.code,
        duration_ns=span.end_time_unix_nano - span.start_time_unix_nano,
    )


@dataclass
class Receiver:
    """What the receiver got: spans in arrival order, and each request's headers."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes, headers: dict[str, str]) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        decoded: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                decoded.extend(_decoded(span, resource) for span in scope_spans.spans)
        with self.lock:
            self.spans.extend(decoded)
            self.headers.append(headers)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """The spans by trace id."""
        found: dict[str, list[ReceivedSpan]] = {}
        with self.lock:
            for span in self.spans:
                found.setdefault(span.trace_id, []).append(span)
        return found


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    receiver: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            self._send(404, b"")
            return
        if self.headers.get("Content-Type") != "application/x-protobuf":
            self._send(415, b"")
            return
        self.receiver.take(body, {k.lower(): v for k, v in self.headers.items()})
        self._send(200, ExportTraceServiceResponse().SerializeToString())

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not access logs."""


@contextmanager
def receiving() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on an ephemeral loopback port for the duration of the block;
    `url` is what `$OTEL_EXPORTER_OTLP_ENDPOINT` takes."""
    receiver = Receiver()
    handler = type("Handler", (_Handler,), {"receiver": receiver})
    with serving_in_thread(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as receiver.url:
        yield receiver
