"""`jobrelay up`: the whole local stack in one process tree, stopped by Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from types import FrameType

import typer
import uvicorn
from rich.console import Console

from jobrelay.api import create_app
from jobrelay.bootstrap import (
    aws_endpoint,
    build_services,
    database,
    local_emulator,
    prepare_aws,
    require_free_port,
)
from jobrelay.settings import Settings, load_settings

console = Console()


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
    app.command("api")(api_command)


def up_command(
    port: int | None = typer.Option(None, help="API port (default: JOBRELAY_API_PORT)."),
) -> None:
    """Start embedded PostgreSQL, migrations, the SQS/S3 emulator and the API."""
    settings = _with_port(load_settings(), port)
    _require_free_port(settings)
    _interrupt_on_sigterm()
    with contextlib.suppress(KeyboardInterrupt):
        _run_stack(settings)
    console.print("stopped")


def _run_stack(settings: Settings) -> None:
    with database(settings) as dsn, local_emulator(settings) as endpoint_url:
        endpoint = aws_endpoint(settings, endpoint_url)
        asyncio.run(prepare_aws(settings, endpoint))
        base = f"http://{settings.api_host}:{settings.api_port}"
        console.print(f"[bold green]jobrelay is up[/]\n  API      {base}\n  OpenAPI  {base}/docs")
        console.print(f"  SQS/S3   {endpoint_url}\n  data     {settings.data_dir.resolve()}")
        console.print("Press Ctrl-C to stop.")
        asyncio.run(_serve_api(settings, dsn, endpoint_url))


def api_command(
    port: int | None = typer.Option(None, help="API port (default: JOBRELAY_API_PORT)."),
) -> None:
    """Run only the API against DATABASE_URL (or the embedded server)."""
    settings = _with_port(load_settings(), port)
    _require_free_port(settings)
    _interrupt_on_sigterm()
    with contextlib.suppress(KeyboardInterrupt), database(settings) as dsn:
        asyncio.run(_serve_api(settings, dsn, settings.aws_endpoint_url))


def _interrupt_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C so every started server is stopped on the way out.

    uvicorn re-raises the signal it caught after shutting down; with the default SIGTERM
    action that would end the process before the embedded PostgreSQL is stopped.
    """

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def _with_port(settings: Settings, port: int | None) -> Settings:
    if port is None:
        return settings
    return settings.model_copy(update={"api_port": port})


def _require_free_port(settings: Settings) -> None:
    require_free_port(
        settings.api_host, settings.api_port, what="the API", setting="JOBRELAY_API_PORT"
    )


async def _serve_api(settings: Settings, dsn: str, endpoint_url: str | None) -> None:
    async with build_services(settings, dsn, aws_endpoint(settings, endpoint_url)) as services:
        config = uvicorn.Config(
            create_app(services),
            host=settings.api_host,
            port=settings.api_port,
            log_level="warning",
            lifespan="off",
        )
        await uvicorn.Server(config).serve()
