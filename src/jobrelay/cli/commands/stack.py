"""`jobrelay up` (the whole local stack in one process) and `jobrelay api` (the API alone).

`up` starts embedded PostgreSQL (unless DATABASE_URL), runs migrations, starts the SQS/S3
emulator (unless an endpoint is configured) with its queues and bucket, then supervises the
API and the background components in one event loop. Ctrl-C or SIGTERM stops them all, then
the emulator and PostgreSQL; a second `up` reuses the same data directory. While it runs,
`data_dir/up.json` records its API URL and emulator endpoint for the one-shot commands
(`jobrelay.cli.running_stack`). Each phase prints a line: the first start takes a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import typer
import uvicorn
from rich.console import Console

from jobrelay.api import create_app
from jobrelay.bootstrap import (
    Services,
    StartupError,
    aws_endpoint,
    build_services,
    database,
    jobs_registry,
    keep_embedded_running,
    local_emulator,
    local_issuer,
    prepare_aws,
    require_free_port,
    require_own_data_dir,
    require_safe_environment,
    run_relay,
    run_sqs_worker,
    start_tracing,
    worker_config,
)
from jobrelay.cli.options import APP_OPTION, with_apps
from jobrelay.cli.running_stack import recorded, running_stack
from jobrelay.logs import configure_logging
from jobrelay.settings import Settings, load_settings

console = Console()

# Where earlier releases kept the local stack's data: the current folder.
LEGACY_DATA_DIR = ".jobrelay"

# A background component of the stack: runs until `stop` is set.
Component = Callable[[Services, asyncio.Event], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class StackPart:
    name: str
    run: Component


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
    app.command("api")(api_command)


def up_command(
    port: int | None = typer.Option(None, help="API port (default: JOBRELAY_API_PORT)."),
    app: list[str] | None = APP_OPTION,
) -> None:
    """Start the whole local stack: PostgreSQL, migrations, emulator, API and workers."""
    # The local stack is development whatever JOBRELAY_ENV says: it runs the embedded
    # PostgreSQL, the emulator and the local issuer, which production refuses.
    settings = _for_stack(_with_port(with_apps(load_settings(env="development"), app), port))
    settings = settings.updated(db={"pool_max": max(settings.db.pool_max, 30)})
    require_own_data_dir(settings)
    _refuse_a_second_up(settings)
    _require_free_port(settings)
    jobs_registry(settings)  # an --app that does not load stops here, before anything starts
    configure_logging(settings)
    start_tracing(settings, "up")
    _interrupt_on_sigterm()
    with contextlib.suppress(KeyboardInterrupt):
        _run_stack(settings)
    console.print("stopped")


def api_command(
    port: int | None = typer.Option(None, help="API port (default: JOBRELAY_API_PORT)."),
    app: list[str] | None = APP_OPTION,
) -> None:
    """Run only the API against DATABASE_URL (or the embedded server)."""
    settings = _with_port(with_apps(load_settings(default_env="production"), app), port)
    require_safe_environment(settings, "api")
    _require_free_port(settings)
    jobs_registry(settings)
    configure_logging(settings)
    start_tracing(settings, "api")
    _interrupt_on_sigterm()
    with contextlib.suppress(KeyboardInterrupt), database(settings) as dsn:
        asyncio.run(_supervise(settings, dsn, settings.aws.endpoint_url, parts=[]))


def stack_parts(settings: Settings, dsn: str) -> list[StackPart]:
    """The background components `up` runs beside the API."""

    async def sqs_worker(services: Services, stop: asyncio.Event) -> None:
        await run_sqs_worker(settings, stop, endpoint_url=services.aws.endpoint_url)

    async def jobs_worker(services: Services, stop: asyncio.Event) -> None:
        await services.jobs.worker(worker_config(settings, services.jobs.registry)).run_until(stop)

    async def relay(services: Services, stop: asyncio.Event) -> None:
        await run_relay(settings, dsn, services.aws, stop)

    async def postgres_watchdog(services: Services, stop: asyncio.Event) -> None:
        await keep_embedded_running(settings, stop, say=_progress)

    parts = [
        StackPart("relay", relay),
        StackPart("jobs-worker", jobs_worker),
        StackPart("sqs-worker", sqs_worker),
    ]
    if not settings.db.url:  # the embedded server is this stack's to keep running
        parts.append(StackPart("postgres-watchdog", postgres_watchdog))
    return parts


def _run_stack(settings: Settings) -> None:
    _mention_a_folder_data_dir(settings)
    if settings.db.url:
        _progress("migrating the database at DATABASE_URL")
    elif (settings.pgdata_dir / "PG_VERSION").exists():
        _progress(f"starting PostgreSQL in {settings.pgdata_dir} and migrating")
    else:
        _progress(
            f"creating a PostgreSQL cluster in {settings.pgdata_dir} (the first start only) "
            "and migrating"
        )
    with database(settings, own_stack=True) as dsn:
        if not settings.aws.endpoint_url:
            _progress("starting the SQS/S3 emulator")
        with local_emulator(settings) as endpoint_url:
            _progress(f"creating the queues and the bucket at {endpoint_url}")
            endpoint = aws_endpoint(settings, endpoint_url)
            asyncio.run(prepare_aws(settings, endpoint))
            with recorded(
                settings,
                api_url=_api_url(settings),
                aws_endpoint_url=endpoint_url,
                emulator_started=not settings.aws.endpoint_url,
            ):
                _print_welcome(settings, endpoint_url)
                asyncio.run(
                    _supervise(settings, dsn, endpoint_url, parts=stack_parts(settings, dsn))
                )


def _mention_a_folder_data_dir(settings: Settings) -> None:
    """Earlier releases kept the data in `.jobrelay` under the current folder; a stack
    started there now would quietly begin with an empty database, so say where the old one
    is and how to keep using it."""
    legacy = Path(LEGACY_DATA_DIR).resolve()
    if "data_dir" in settings.model_fields_set or legacy == settings.data_dir.resolve():
        return
    if (legacy / "pgdata" / "PG_VERSION").exists():
        _progress(
            f"{legacy} holds the data of an earlier `jobrelay up` and is not used: the data "
            f"directory is {settings.data_dir.resolve()} (JOBRELAY_DATA_DIR={LEGACY_DATA_DIR} "
            "keeps using the old one)"
        )


def _progress(step: str) -> None:
    console.print(f"[dim]…[/] {step}", highlight=False)


def _api_url(settings: Settings) -> str:
    return f"http://{settings.api.host}:{settings.api.port}"


def _metrics_lines(settings: Settings, base: str) -> list[str]:
    """Where each part of the stack serves Prometheus metrics (the banner of `up`)."""
    guarded = " (bearer JOBRELAY_API_METRICS_TOKEN)" if settings.api.metrics_token else ""
    lines = [f"metrics  {base}/metrics: API and database gauges{guarded}"]
    for part, port, setting in (
        ("worker", settings.worker.metrics_port, "JOBRELAY_WORKER_METRICS_PORT"),
        ("relay", settings.relay.metrics_port, "JOBRELAY_RELAY_METRICS_PORT"),
    ):
        if port:
            lines.append(f"metrics  http://{settings.api.host}:{port}/metrics: {part}")
        elif port == 0 and part == "worker":
            lines.append(f"metrics  {part}: on a free port (its log names it)")
        else:
            lines.append(f"metrics  {part}: not served (set {setting})")
    return lines


def _print_welcome(settings: Settings, endpoint_url: str | None) -> None:
    base = _api_url(settings)
    console.print(f"[bold green]jobrelay is up[/]\n  API      {base}\n  OpenAPI  {base}/docs")
    console.print(f"  SQS/S3   {endpoint_url}\n  data     {settings.data_dir.resolve()}")
    console.print(f"  console  {base}/ui")
    for line in _metrics_lines(settings, base):
        console.print(f"  {line}", highlight=False)
    if settings.auth.mode == "local":
        token = local_issuer(settings).mint("demo", ttl_s=12 * 3600, admin=True)
        console.print("A token (sub demo, admin group, 12 h) and an example request:")
        console.print(f"  export TOKEN={token}", soft_wrap=True, highlight=False)
        console.print(f'  curl -s -H "Authorization: Bearer $TOKEN" {base}/v1/me', highlight=False)
    activate = _activate_hint()
    if activate:
        console.print(
            f"In another terminal, {activate} puts `jobrelay` on your PATH.",
            soft_wrap=True,
            highlight=False,
        )
    console.print("Press Ctrl-C to stop.")


def _activate_hint() -> str | None:
    """`. <venv>/bin/activate` when this `jobrelay` is not the one on the PATH (run as
    `make up` or `.venv/bin/jobrelay up`), so the commands the docs write work as written."""
    venv_bin = Path(sys.executable).parent
    script = venv_bin / "jobrelay"
    on_path = shutil.which("jobrelay")
    if not (venv_bin / "activate").exists() or (on_path and Path(on_path) == script):
        return None
    return f"`. {venv_bin / 'activate'}`"


class _SupervisedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the supervisor decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _supervise(
    settings: Settings, dsn: str, endpoint_url: str | None, *, parts: list[StackPart]
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        endpoint = aws_endpoint(settings, endpoint_url)
        async with build_services(settings, dsn, endpoint, serves_api=True) as services:
            server = _SupervisedServer(
                uvicorn.Config(
                    create_app(services),
                    host=settings.api.host,
                    port=settings.api.port,
                    log_level="warning",
                    lifespan="off",
                )
            )
            tasks = [asyncio.create_task(server.serve(), name="api")]
            tasks += [
                asyncio.create_task(part.run(services, stop), name=part.name) for part in parts
            ]
            stopper = asyncio.create_task(stop.wait(), name="stop-signal")
            await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
            stop.set()
            server.should_exit = True
            results = await asyncio.gather(*tasks, return_exceptions=True)
            stopper.cancel()
            fatal: StartupError | None = None
            for task, result in zip(tasks, results, strict=True):
                if isinstance(result, StartupError):
                    fatal = fatal or result  # one line and exit 2, after everything stopped
                elif isinstance(result, BaseException) and not isinstance(
                    result, asyncio.CancelledError
                ):
                    console.print(f"[red]{task.get_name()} failed:[/] {result}")
            if fatal is not None:
                raise fatal
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _for_stack(settings: Settings) -> Settings:
    """Point the in-stack SQS worker at this API unless its webhook URL was configured."""
    if "webhook_url" in settings.sqs_worker.model_fields_set:
        return settings
    return settings.updated(sqs_worker={"webhook_url": f"{_api_url(settings)}/v1/webhooks/worker"})


def _interrupt_on_sigterm() -> None:
    """Until the supervisor installs its handlers, SIGTERM unwinds like Ctrl-C, so the
    embedded PostgreSQL and the emulator are stopped on the way out."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def _with_port(settings: Settings, port: int | None) -> Settings:
    if port is None:
        return settings
    return settings.updated(api={"port": port})


def _refuse_a_second_up(settings: Settings) -> None:
    stack = running_stack(settings)
    if stack is not None:
        raise StartupError(
            f"another `jobrelay up` runs for the data directory {settings.data_dir.resolve()} "
            f"(pid {stack.pid}, API {stack.api_url}): use it as it is, or stop it first "
            f"(Ctrl-C in its terminal, or `kill {stack.pid}`)"
        )


def _require_free_port(settings: Settings) -> None:
    require_free_port(
        settings.api.host, settings.api.port, what="the API", setting="JOBRELAY_API_PORT"
    )
