"""`jobrelay sqs-worker`: one reference SQS worker process (no database access).

SIGTERM or Ctrl-C stops receiving and lets in-flight messages finish for
JOBRELAY_SQS_WORKER_SHUTDOWN_GRACE_S; a second signal (or the end of the grace) abandons
them, which makes them visible on the queue again at once.
"""

from __future__ import annotations

import asyncio
import signal

import typer

from jobrelay.bootstrap import require_safe_environment, run_sqs_worker, start_tracing
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.logs import configure_logging
from jobrelay.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("sqs-worker")(sqs_worker_command)


def sqs_worker_command(
    concurrency: int | None = typer.Option(
        None, min=1, help="Messages worked at once (default: JOBRELAY_SQS_WORKER_CONCURRENCY)."
    ),
    webhook_url: str | None = typer.Option(
        None, help="Where outcomes are posted (default: JOBRELAY_SQS_WORKER_WEBHOOK_URL)."
    ),
) -> None:
    """Long-poll the work queue, do the work, store results in S3, post signed outcomes."""
    given = {"concurrency": concurrency, "webhook_url": webhook_url}
    overrides = {name: value for name, value in given.items() if value is not None}
    settings = load_cli_settings(default_env="production", sqs_worker=overrides)
    require_safe_environment(settings, "sqs-worker")
    configure_logging(settings)
    start_tracing(settings, "sqs-worker")
    asyncio.run(_run(settings))


async def _run(settings: Settings) -> None:
    stop = asyncio.Event()
    abandon = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            abandon.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    await run_sqs_worker(settings, stop, abandon=abandon)
