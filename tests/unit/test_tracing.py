"""`jobrelay.tracing` and `bootstrap.start_tracing` (issue 25): off unless the `OTEL_*`
variables configure an exporter, and then nothing of OpenTelemetry is imported; on, spans
continue the W3C context they are given."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from pydantic import ValidationError

from jobrelay import tracing
from jobrelay.bootstrap import StartupError, start_tracing
from jobrelay.settings import Settings, load_settings
from tests.harness import cli_env
from tests.tracing_support import traced_here

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture(autouse=True)
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_off_every_call_is_a_no_op() -> None:
    assert not tracing.enabled()
    with tracing.span("x", parent=TRACEPARENT) as span:
        assert span is None
        assert tracing.current_traceparent() is None
        tracing.annotate({"a": 1})
        tracing.fail("nothing to mark")
    assert tracing.start_span("y") is None
    tracing.end_span(None, error="ignored")
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}
    assert tracing.add_trace_ids(None, "info", {"event": "e"}) == {"event": "e"}


@pytest.mark.parametrize(
    ("environment", "enabled"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, False),
    ],
)
def test_the_standard_variables_decide_whether_a_process_traces(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], enabled: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert load_settings().tracing.enabled is enabled


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_TRACES_EXPORTER", "jaeger"),
        ("OTEL_SDK_DISABLED", "maybe"),
    ],
)
def test_unsupported_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError):
        load_settings()


def test_without_configuration_nothing_of_the_sdk_is_imported() -> None:
    """A process that does not trace builds the app, enqueues' rows and logs without
    importing OpenTelemetry's SDK (the cost of tracing off is one test of a global)."""
    script = textwrap.dedent(
        """
        import sys
        from jobrelay import tracing
        from jobrelay.api import create_app
        from jobrelay.bootstrap import start_tracing
        from jobrelay.logs import configure_logging
        from jobrelay.settings import load_settings
        import jobrelay.cli.main, jobrelay.jobs.worker, jobrelay.batches.relay
        import jobrelay.sqs_workers.runtime
        settings = load_settings()
        configure_logging(settings)
        assert start_tracing(settings, "api") is None
        assert not tracing.enabled()
        with tracing.span("x"):
            pass
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
        assert not loaded, loaded
        print("ok")
        """
    )
    env = cli_env(**dict.fromkeys(OTEL_VARIABLES))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_start_tracing_names_the_process_and_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    provider = start_tracing(load_settings(), "relay")
    assert provider is not None
    try:
        assert tracing.enabled()
        with tracing.span("x") as span:
            assert span is not None
        assert provider.resource.attributes["service.name"] == "jobrelay-relay"
    finally:
        tracing.use(None)
        provider.shutdown()  # its console exporter writes to this test's captured stdout


def test_a_missing_sdk_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    settings = Settings(tracing={"otlp_endpoint": "http://127.0.0.1:4318"})
    with pytest.raises(StartupError, match=r"jobrelay\[otel\]"):
        start_tracing(settings, "worker")
    assert not tracing.enabled()


def test_a_span_continues_the_context_it_is_given() -> None:
    with traced_here() as spans:
        with tracing.span("child", parent=TRACEPARENT):
            carried = tracing.current_traceparent()
        with tracing.span("outer"), tracing.span("fresh", parent=None):
            pass
        with tracing.span("garbled", parent="00-not-a-context"):
            pass
        sent = tracing.start_span("sent", kind="producer", parent=TRACEPARENT)
        tracing.end_span(sent, error="refused")
    child = spans.one("child")
    assert (child.trace_id, child.parent_id) == (TRACEPARENT[3:35], TRACEPARENT[36:52])
    assert child.made(carried)
    assert spans.one("fresh").parent_id is None  # None: a new trace, not the outer's
    assert spans.one("fresh").trace_id != spans.one("outer").trace_id
    assert spans.one("garbled").parent_id is None
    assert spans.one("sent").error and spans.one("sent").kind == "producer"
    assert spans.one("sent").parent_id == TRACEPARENT[36:52]


def test_an_exception_marks_the_span_and_annotate_and_fail_reach_the_active_span() -> None:
    with traced_here() as spans:
        with pytest.raises(ValueError), tracing.span("raises"):
            raise ValueError("boom")
        with tracing.span("failed"):
            tracing.annotate({"k": "v"})
            tracing.fail("no")
        headers: dict[str, str] = {}
        with tracing.span("call"):
            tracing.inject(headers)
    assert spans.one("raises").error
    assert spans.one("failed").error and spans.one("failed").attributes == {"k": "v"}
    assert spans.one("call").made(headers["traceparent"])


def test_token_hash_is_short_and_stable() -> None:
    assert tracing.token_hash("a") == tracing.token_hash("a") != tracing.token_hash("b")
    assert len(tracing.token_hash("a")) == 16
