"""Collecting spans in tests: the SDK's in-memory exporter for spans made in this process,
and an OTLP/HTTP receiver on a loopback port for spans exported by real processes.

`Collected` is what both give: a span's name, ids, parent, kind, status, attributes and the
`service.name` of the process that made it, with the lookups the trace tests need.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from jobrelay import tracing

# OTLP's span kinds (opentelemetry.proto.trace.v1.Span.SpanKind) by number.
_OTLP_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class Collected:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    error: bool
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def made(self, traceparent: str | None) -> bool:
        """Whether `traceparent` is this span's context (its ids; flags aside)."""
        return traceparent is not None and traceparent.split("-")[1:3] == [
            self.trace_id,
            self.span_id,
        ]


class Spans:
    """Spans collected so far, with lookups (each a snapshot)."""

    def __init__(self) -> None:
        self._spans: list[Collected] = []
        self._lock = threading.Lock()

    def add(self, spans: Iterable[Collected]) -> None:
        with self._lock:
            self._spans.extend(spans)

    def all(self) -> list[Collected]:
        with self._lock:
            return list(self._spans)

    def named(self, prefix: str, **attributes: Any) -> list[Collected]:
        """Spans whose name starts with `prefix` and whose attributes include these."""
        return [
            s
            for s in self.all()
            if s.name.startswith(prefix)
            and all(s.attributes.get(k) == v for k, v in attributes.items())
        ]

    def one(self, prefix: str, **attributes: Any) -> Collected:
        found = self.named(prefix, **attributes)
        assert len(found) == 1, (prefix, attributes, found, [s.name for s in self.all()])
        return found[0]

    def by_id(self, span_id: str | None) -> Collected:
        matches = [s for s in self.all() if s.span_id == span_id]
        assert matches, f"no span {span_id} among {[(s.name, s.span_id) for s in self.all()]}"
        return matches[0]

    def parent_of(self, span: Collected) -> Collected:
        assert span.parent_id is not None, f"{span.name} has no parent"
        return self.by_id(span.parent_id)


# -- in this process ---------------------------------------------------------------------


class _Exported(Spans):
    """The spans an in-memory exporter holds (read when asked)."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__()
        self._exporter = exporter

    def all(self) -> list[Collected]:
        return [_from_sdk(span) for span in self._exporter.get_finished_spans()]


@contextmanager
def traced_here() -> Iterator[Spans]:
    """Tracing on in this process for the block, every span exported to memory at its end;
    off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield _Exported(exporter)
    finally:
        tracing.use(None)
        provider.shutdown()


def _from_sdk(span: ReadableSpan) -> Collected:
    context = span.get_span_context()
    assert context is not None
    return Collected(
        name=span.name,
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=None if span.parent is None else f"{span.parent.span_id:016x}",
        kind=span.kind.name.lower(),
        error=span.status.status_code is StatusCode.ERROR,
        service=str(span.resource.attributes.get("service.name", "")),
        attributes=dict(span.attributes or {}),
    )


# -- from other processes ------------------------------------------------------------------


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Spans]]:
    """An OTLP/HTTP trace receiver on a loopback port: yields its base URL (for
    `OTEL_EXPORTER_OTLP_ENDPOINT`) and the spans it has received."""
    spans = Spans()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans.add(_from_otlp(request))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def _from_otlp(request: ExportTraceServiceRequest) -> list[Collected]:
    collected = []
    for resource_spans in request.resource_spans:
        service = next(
            (
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            ),
            "",
        )
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                collected.append(
                    Collected(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        kind=_OTLP_KINDS.get(span.kind, "unspecified"),
                        error=span.status.code == 2,  # STATUS_CODE_ERROR
                        service=service,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                    )
                )
    return collected


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)
