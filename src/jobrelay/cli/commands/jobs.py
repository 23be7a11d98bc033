"""`jobrelay worker` and `jobrelay jobs ...`: run jobs, and enqueue/inspect/cancel/retry them.

Output of the `jobs` commands is JSON (camelCase, as the API returns it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import signal
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from jobrelay.api.routes.jobs import (
    AttemptOut,
    AttemptPageOut,
    DiagnosisOut,
    JobOut,
    JobPageOut,
)
from jobrelay.api.routes.schedules import ScheduleOut, SchedulePage
from jobrelay.bootstrap import (
    Services,
    WorkerConfig,
    build_services,
    database,
    jobs_registry,
    parse_slots,
    require_safe_environment,
    start_tracing,
    worker_config,
    worker_pool_size,
)
from jobrelay.cli.options import APP_OPTION, with_apps
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs_config import format_class_counts
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import Attempt, JobFilter
from jobrelay.logs import configure_logging
from jobrelay.settings import Settings

console = Console()
jobs_app = typer.Typer(help="Enqueue, inspect, cancel and retry jobs.", no_args_is_help=True)
schedules_app = typer.Typer(help="The cron schedules that enqueue jobs.", no_args_is_help=True)
T = TypeVar("T")


def register(app: typer.Typer) -> None:
    app.command("worker")(worker_command)
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(schedules_app, name="schedules")


def worker_command(
    slots: str | None = typer.Option(
        None,
        help="Jobs run at once per concurrency class, e.g. ai=2,default=8 "
        "(default: JOBRELAY_WORKER_SLOTS). A class left out is not claimed.",
    ),
    concurrency: int | None = typer.Option(
        None,
        help="Total jobs run at once; alone, every class shares them "
        "(default: JOBRELAY_WORKER_CONCURRENCY, else the sum of the slots).",
    ),
    metrics_port: int | None = typer.Option(
        None, help="Serve Prometheus /metrics on this port (0: any free port)."
    ),
    grace: float | None = typer.Option(
        None, help="Seconds running jobs may finish on SIGTERM/SIGINT before being released."
    ),
    app: list[str] | None = APP_OPTION,
) -> None:
    """Run a jobs worker until SIGINT/SIGTERM (running jobs finish or are released)."""
    parsed = parse_slots(slots) if slots is not None else None
    if concurrency is not None and concurrency < 1:
        raise InvalidInput(
            f"invalid --concurrency {concurrency}: must be >= 1",
            [FieldError("--concurrency", "must be >= 1")],
        )
    settings = with_apps(load_cli_settings(default_env="production"), app)
    require_safe_environment(settings, "worker")
    configure_logging(settings)
    start_tracing(settings, "worker")
    registry = jobs_registry(settings)  # checked before anything starts
    try:
        config = worker_config(
            settings,
            registry,
            concurrency=concurrency,
            slots=parsed,
            metrics_port=metrics_port,
            shutdown_grace_s=grace,
        )
    except ValueError as exc:
        raise InvalidInput(str(exc), [FieldError("worker", str(exc))]) from None
    with database(settings) as dsn:
        asyncio.run(_run_worker(settings, dsn, config))


async def _run_worker(settings: Settings, dsn: str, config: WorkerConfig) -> None:
    settings = settings.updated(db={"pool_max": worker_pool_size(settings, config)})
    async with build_services(settings, dsn) as services:
        worker = services.jobs.worker(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await worker.start()
        port = f", metrics on :{worker.metrics_port}" if worker.metrics_port is not None else ""
        console.print(
            f"worker {worker.worker_id} running (slots {format_class_counts(config.class_slots)}"
            f", total {config.total_slots}{port})"
        )
        try:
            await stop.wait()
        finally:
            await worker.stop()
        console.print(f"worker stopped: {worker.stats}")


def with_services(action: Callable[[Services], Awaitable[T]], apps: list[str] | None = None) -> T:
    """Run `action` on the services of the CLI's settings (the `--app` groups added), over
    the configured database (the embedded one started for the call when it is local)."""
    settings = with_apps(load_cli_settings(), apps)
    with database(settings) as dsn:

        async def run() -> T:
            async with build_services(settings, dsn) as services:
                return await action(services)

        return asyncio.run(run())


def print_json(value: Any) -> None:
    """Print JSON; response models print exactly as the API sends them."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    console.print_json(json.dumps(value, default=str))


def _job_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput("invalid job id", [FieldError("id", "not a UUID")]) from None


@jobs_app.command("enqueue")
def enqueue_command(
    job_type: str = typer.Argument(..., metavar="TYPE", help="Job type, e.g. diag.noop."),
    payload: str = typer.Option("{}", "--payload", "-p", help="Payload as JSON."),
    priority: int | None = typer.Option(None, help="0 is the most urgent."),
    delay: float = typer.Option(0.0, help="Seconds before the job becomes available."),
    run_at: str | None = typer.Option(
        None,
        help="When the job becomes available, RFC 3339 with an offset, e.g. "
        "2026-12-24T18:00:00+01:00 (not with --delay).",
    ),
    max_attempts: int | None = typer.Option(None, help="Attempts before failing."),
    app: list[str] | None = APP_OPTION,
) -> None:
    """Enqueue one job; prints its id and the outcome (created, merged, ...)."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise InvalidInput("payload is not JSON", [FieldError("payload", str(exc))]) from exc
    request = EnqueueRequest(
        type=job_type,
        payload=data,
        priority=priority,
        delay_s=delay or None,  # 0, the option's default, is no delay: --run-at may be given
        run_at=_run_at(run_at) if run_at is not None else None,
        max_attempts=max_attempts,
    )
    # The engine's contract, checked before the database starts, named by the options.
    problems = request.problems()
    if problems:
        raise InvalidInput(
            "invalid job", [FieldError(_OPTIONS.get(e.path, e.path), e.message) for e in problems]
        )
    result = with_services(lambda s: s.jobs.enqueue(request), app)
    print_json({"id": str(result.id), "outcome": result.outcome.value, "revision": result.revision})


# The enqueue contract's fields (`EnqueueRequest.problems`) as `jobs enqueue` options.
_OPTIONS = {
    "priority": "--priority",
    "delay": "--delay",
    "runAt": "--run-at",
    "maxAttempts": "--max-attempts",
}


def _time(text: str | None, option: str) -> dt.datetime | None:
    """A list filter's time: ISO 8601, a date alone or a time without an offset is UTC."""
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        message = "must be an ISO 8601 date or date-time, e.g. 2026-12-01T18:00:00Z"
        raise InvalidInput(
            f"invalid {option} {text!r}: {message}", [FieldError(option, message)]
        ) from None
    return when if when.utcoffset() is not None else when.replace(tzinfo=dt.UTC)


def _run_at(text: str) -> dt.datetime:
    message = "must be an RFC 3339 date-time with an offset, e.g. 2026-12-24T18:00:00+01:00"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"invalid --run-at {text!r}: {message}", [FieldError("--run-at", message)]
        ) from None
    if "T" not in text.upper() or when.utcoffset() is None:
        raise InvalidInput(
            f"invalid --run-at {text!r}: {message}", [FieldError("--run-at", message)]
        )
    return when


@jobs_app.command("show")
def show_command(job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Show one job."""
    job = with_services(lambda s: s.jobs.get(_job_id(job_id)))
    print_json(JobOut.of(job))


@jobs_app.command("list")
def list_command(
    job_type: str | None = typer.Option(None, "--type", help="Only this type."),
    status: str | None = typer.Option(None, help="Only this status."),
    concurrency_class: str | None = typer.Option(None, "--class", help="Only this class."),
    source_key: str | None = typer.Option(None, help="Only this source key."),
    dedupe_key: str | None = typer.Option(None, help="Only this dedupe key."),
    created_from: str | None = typer.Option(None, help="Created at or after (ISO 8601)."),
    created_to: str | None = typer.Option(None, help="Created before (ISO 8601)."),
    finished_from: str | None = typer.Option(None, help="Finished at or after (ISO 8601)."),
    finished_to: str | None = typer.Option(None, help="Finished before (ISO 8601)."),
    limit: int = typer.Option(50, help="Page size (1-500)."),
    before: str | None = typer.Option(None, help="Cursor: the nextCursor of the last page."),
) -> None:
    """List jobs, newest first, with the filters of GET /v1/jobs (times: ISO 8601, a time
    without an offset is UTC)."""
    cursor = _job_id(before) if before else None
    job_filter = JobFilter(
        type=job_type,
        status=status,
        concurrency_class=concurrency_class,
        source_key=source_key,
        dedupe_key=dedupe_key,
        created_from=_time(created_from, "--created-from"),
        created_to=_time(created_to, "--created-to"),
        finished_from=_time(finished_from, "--finished-from"),
        finished_to=_time(finished_to, "--finished-to"),
    )
    page = with_services(lambda s: s.jobs.list_jobs(filter=job_filter, limit=limit, before=cursor))
    print_json(JobPageOut(items=[JobOut.of(j) for j in page.jobs], next_cursor=page.next_before))


@jobs_app.command("attempts")
def attempts_command(job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """The job's attempts that ended without success (failure, lease expired, cancel while
    running), oldest first, each with its error."""
    wanted = _job_id(job_id)

    async def attempts(services: Services) -> list[Attempt]:
        await services.jobs.get(wanted)
        return await services.jobs.attempts(wanted)

    found = with_services(attempts)
    print_json(AttemptPageOut(items=[AttemptOut.of(a) for a in found]))


@jobs_app.command("cancel")
def cancel_command(job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Cancel a pending or running job."""
    print_json(JobOut.of(with_services(lambda s: s.jobs.cancel(_job_id(job_id)))))


@jobs_app.command("retry")
def retry_command(job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Put a failed or cancelled job back to pending with fresh attempts."""
    print_json(JobOut.of(with_services(lambda s: s.jobs.retry(_job_id(job_id)))))


@jobs_app.command("why")
def why_command(job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Why isn't this job running? The reason, a sentence and the blocker by name."""
    print_json(DiagnosisOut.of(with_services(lambda s: s.jobs.diagnose(_job_id(job_id)))))


_MEDIA_IDS = typer.Argument(..., metavar="MEDIA_ID...")


@jobs_app.command("media-status")
def media_status_command(media_ids: list[str] = _MEDIA_IDS) -> None:
    """The state of the newest media.process job of each media id (or none)."""
    statuses = with_services(lambda s: s.media.media_status(media_ids))
    print_json([{"mediaId": m.media_id, "status": m.status} for m in statuses])


@schedules_app.command("list")
def schedules_list_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON, as GET /v1/schedules."),
    app: list[str] | None = APP_OPTION,
) -> None:
    """Schedules by name: cron, time zone, next and last tick, job type, catch-up policy.

    A schedule declared here but not yet started by any worker has no next tick; one
    stored but no longer declared here is marked `(not declared)`.
    """
    views = with_services(lambda s: s.jobs.schedules(), app)
    page = SchedulePage(items=[ScheduleOut.of(v) for v in views])
    if as_json:
        print_json(page)
        return
    table = Table("name", "cron", "timezone", "next tick", "last tick", "job type", "catch-up")
    for item in page.items:
        table.add_row(
            item.name if item.declared else f"{item.name} (not declared)",
            item.cron,
            item.timezone,
            _when(item.next_tick_at),
            _when(item.last_tick_at),
            item.job_type,
            item.catch_up,
        )
    console.print(table)


def _when(moment: dt.datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(dt.UTC).isoformat()
