"""`jobrelay relay`: deliver batch outbox messages to SQS until stopped (SIGINT/SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import typer

from jobrelay.bootstrap import (
    aws_endpoint,
    database,
    require_safe_environment,
    run_relay,
    start_tracing,
)
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("relay")(relay_command)


def relay_command(
    metrics_port: int | None = typer.Option(
        None, help="Serve Prometheus metrics on this port (default: JOBRELAY_RELAY_METRICS_PORT)."
    ),
) -> None:
    """Claim due batch items, send them with SendMessageBatch, record what SQS accepted.

    Any number of relays may run side by side. SIGINT or SIGTERM stops claiming; sends in
    flight finish and are recorded before the process exits.
    """
    settings = load_cli_settings(default_env="production")
    if metrics_port is not None:
        settings = settings.updated(relay={"metrics_port": metrics_port})
    require_safe_environment(settings, "relay")
    start_tracing(settings, "relay")
    with database(settings) as dsn:
        asyncio.run(_run(settings, dsn))


async def _run(settings: Settings, dsn: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await run_relay(settings, dsn, aws_endpoint(settings), stop)
