"""Traces (OpenTelemetry), off unless configured: the spans and the W3C trace context that
every part uses.

Every part may import this module (like `jobrelay.loops`, it imports no jobrelay package),
so the jobs engine, the relay, the API and the SQS workers, which never import the database
package, share one way to start spans and one propagation format. OpenTelemetry itself is
imported only when tracing is turned on (`use(provider)`, called by
`jobrelay.bootstrap.tracing` when the standard `OTEL_*` variables configure an exporter).
Until then every function here tests one module global and returns: a process without
tracing imports no OpenTelemetry module and needs none installed.

Propagation is W3C trace context, as its `traceparent` text
(`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`; `tracestate` is not carried):

* in a job's row (`jobs.traceparent`): the context of the span that enqueued it;
* in a batch's row (`batch.traceparent`): the context of the request that created it;
* in the SQS message attribute `traceparent`: the relay's send span;
* in the `traceparent` header of a webhook call: the SQS worker's call span.

A `parent` argument is such a text (a span started under it continues its trace), None (a
new trace: the work was enqueued while tracing was off) or `CURRENT` (the active span, if
any). A malformed text starts a new trace, as a missing one does.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

__all__ = [
    "CURRENT",
    "Attributes",
    "Kind",
    "add_trace_ids",
    "annotate",
    "current_traceparent",
    "enabled",
    "end_span",
    "fail",
    "inject",
    "span",
    "span_traceparent",
    "start_span",
    "token_hash",
    "use",
]

Kind = Literal["internal", "server", "client", "producer", "consumer"]
Attributes = Mapping[str, str | int | float | bool]


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
"""`parent=CURRENT`: under the active span (a new trace when none is active)."""

Parent = str | None | _Current

# Entered when tracing is off: a context manager that does nothing and yields None. One
# shared instance (it keeps no state), so a disabled `span()` allocates nothing.
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


class _Otel:
    """The OpenTelemetry objects of a process that traces (imported by `use`)."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.tracer = provider.get_tracer("jobrelay")
        self.propagator = TraceContextTextMapPropagator()
        self.empty = context.Context()
        self.kinds: dict[str, SpanKind] = {
            "internal": SpanKind.INTERNAL,
            "server": SpanKind.SERVER,
            "client": SpanKind.CLIENT,
            "producer": SpanKind.PRODUCER,
            "consumer": SpanKind.CONSUMER,
        }
        self.error = Status
        self.error_code = StatusCode.ERROR

    def context(self, parent: Parent) -> Any:
        """The OpenTelemetry context a span with `parent` starts in (None: the current)."""
        if isinstance(parent, _Current):
            return None
        if parent is None:
            return self.empty
        return self.propagator.extract({"traceparent": parent}, context=self.empty)


_otel: _Otel | None = None


def use(provider: TracerProvider | None) -> None:
    """Trace with `provider` from now on in this process (None: stop tracing).

    Called once at startup by `jobrelay.bootstrap.tracing.start_tracing`; tests pass a
    provider with an in-memory exporter, then None."""
    global _otel
    _otel = None if provider is None else _Otel(provider)


def enabled() -> bool:
    """True when this process traces. Code that builds attributes tests it first."""
    return _otel is not None


def span(
    name: str,
    *,
    kind: Kind = "internal",
    parent: Parent = CURRENT,
    attributes: Attributes | None = None,
) -> AbstractContextManager[Span | None]:
    """A span around a block, active inside it (spans and log lines started there are its
    children); an exception leaving the block is recorded and sets the error status.
    Yields the span, or None when tracing is off."""
    otel = _otel
    if otel is None:
        return _NO_SPAN
    return otel.tracer.start_as_current_span(
        name, context=otel.context(parent), kind=otel.kinds[kind], attributes=attributes
    )


def start_span(
    name: str,
    *,
    kind: Kind = "internal",
    parent: Parent = CURRENT,
    attributes: Attributes | None = None,
    start_ns: int | None = None,
) -> Span | None:
    """A span that is not made active, for work that is not one block of this task (a
    message among those of one send call, a claim recorded after its statement); end it
    with `end_span`. `start_ns`: when it started (`time.time_ns()`), default now. None
    when tracing is off."""
    otel = _otel
    if otel is None:
        return None
    return otel.tracer.start_span(
        name,
        context=otel.context(parent),
        kind=otel.kinds[kind],
        attributes=attributes,
        start_time=start_ns,
    )


def end_span(span: Span | None, *, error: str | None = None, end_ns: int | None = None) -> None:
    """End a span of `start_span`, with the error status and `error` as its description
    when given."""
    if span is None or _otel is None:
        return
    if error is not None:
        span.set_status(_otel.error(_otel.error_code, error))
    span.end(end_time=end_ns)


def span_traceparent(span: Span | None) -> str | None:
    """The `traceparent` text of `span` (None for None or an invalid span)."""
    if span is None or _otel is None:
        return None
    return _format(span)


def current_traceparent() -> str | None:
    """The `traceparent` text of the active span; None when tracing is off or no span is
    active. What a row records so that later work continues this trace."""
    otel = _otel
    if otel is None:
        return None
    return _format(otel.trace.get_current_span())


def _format(span: Span) -> str | None:
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the active span's `traceparent` to outgoing HTTP headers (nothing when off)."""
    traceparent = current_traceparent()
    if traceparent is not None:
        headers["traceparent"] = traceparent


def annotate(attributes: Attributes) -> None:
    """Set attributes on the active span (nothing when off or no span is recording)."""
    if _otel is None:
        return
    current = _otel.trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)


def fail(description: str) -> None:
    """Mark the active span as failed, with `description` (an outcome that is an error
    without an exception: a failed attempt, a 5xx answer)."""
    if _otel is None:
        return
    current = _otel.trace.get_current_span()
    if current.is_recording():
        current.set_status(_otel.error(_otel.error_code, description))


def token_hash(token: object) -> str:
    """A short SHA-256 of a claim token for span attributes: the token fences every write
    of a claimed job, so traces (sent to another system) carry only its hash, enough to
    tell two claims of one job apart and to match a claim in the logs."""
    return hashlib.sha256(str(token).encode()).hexdigest()[:16]


def add_trace_ids(
    logger: object, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` and `span_id` of the active span on every line
    logged inside one (nothing when tracing is off)."""
    otel = _otel
    if otel is None:
        return event_dict
    context = otel.trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict["trace_id"] = f"{context.trace_id:032x}"
        event_dict["span_id"] = f"{context.span_id:016x}"
    return event_dict
