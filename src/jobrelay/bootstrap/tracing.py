"""Turning traces on for one process, from the standard `OTEL_*` variables.

`start_tracing(settings, service)` is called once by each long-running command (`api`,
`worker`, `relay`, `sqs-worker`, `up`) before it starts work. When `settings.tracing`
configures no exporter it returns None and imports nothing: `jobrelay.tracing` stays off
and every span call is a no-op. Otherwise it builds the SDK's `TracerProvider` (sampler from
`OTEL_TRACES_SAMPLER`, resource from `OTEL_RESOURCE_ATTRIBUTES`), a `BatchSpanProcessor`
(`OTEL_BSP_*`: spans leave in the background, never on the request's path) over the OTLP/HTTP
exporter (`OTEL_EXPORTER_OTLP_*`) or the console exporter, and hands it to
`jobrelay.tracing.use`. The provider flushes its queue when the process exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobrelay import tracing
from jobrelay.bootstrap.errors import StartupError
from jobrelay.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_EXTRA = "pip install 'jobrelay[otel]'"


def start_tracing(settings: Settings, service: str) -> TracerProvider | None:
    """Trace this process when the `OTEL_*` variables say so: the provider it now traces
    with (its owner may shut it down early; it also does at exit), else None. `service`
    names the process (`api`, `worker`, ...) in the default `service.name`,
    `jobrelay-<service>`. Raises `StartupError` when tracing is configured but the
    `jobrelay[otel]` extra is not installed."""
    config = settings.tracing
    if not config.enabled:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError as exc:
        raise StartupError(
            f"tracing is configured (OTEL_* variables) but OpenTelemetry's SDK is missing "
            f"({exc.name}): {_EXTRA}, or unset OTEL_TRACES_EXPORTER and the OTLP endpoints"
        ) from None
    exporter: SpanExporter
    if config.exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise StartupError(
                f"OTLP tracing is configured but its exporter is missing ({exc.name}): {_EXTRA}"
            ) from None
        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
    # An explicit OTEL_SERVICE_NAME wins; else each process names itself.
    name = config.service_name or ("jobrelay" if service == "up" else f"jobrelay-{service}")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracing.use(provider)
    return provider
