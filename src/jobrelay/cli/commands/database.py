"""`jobrelay migrate` and `jobrelay doctor`."""

from __future__ import annotations

import httpx
import typer
from rich.console import Console
from rich.table import Table

from jobrelay.bootstrap import (
    aws_reachable,
    database,
    database_report,
    embedded_pg_ctl,
    require_safe_environment,
)
from jobrelay.cli.running_stack import RunningStack, load_cli_settings, running_stack
from jobrelay.settings import Settings, load_settings

console = Console()


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate_command)
    app.command("doctor")(doctor_command)


def migrate_command() -> None:
    """Bring the database to the newest schema (starts the embedded server if needed)."""
    settings = load_settings()
    # Development by default (it is also how `up`'s database is migrated by hand); with
    # JOBRELAY_ENV=production it refuses to migrate a throwaway embedded server.
    require_safe_environment(settings, "migrate")
    with database(settings, run_migrations=True) as dsn:
        report = database_report(dsn)
    console.print(f"database at revision {report.current_revision} (head {report.head_revision})")


def doctor_command() -> None:
    """Check PostgreSQL version, migration head, table persistence, the running `jobrelay up`
    (its API and the emulator it started) and the SQS/S3 endpoint."""
    settings = load_cli_settings()
    problems: list[str] = []
    with database(settings, run_migrations=False) as dsn:
        report = database_report(dsn)
    table = Table("check", "value", "ok")
    table.add_row("postgresql", report.server_version, "yes")
    migrated = report.migrated
    table.add_row(
        "migrations",
        f"{report.current_revision} (head {report.head_revision})",
        "yes" if migrated else "no",
    )
    if not migrated:
        problems.append("the database is not at the newest migration: run `jobrelay migrate`")
    for name, persistence in report.table_persistence.items():
        ok = persistence == "logged"
        table.add_row(f"table {name}", persistence, "yes" if ok else "no")
        if not ok:
            problems.append(f"table {name} is {persistence}: see `jobrelay ops set-logged`")
    stack = running_stack(settings)
    if stack is not None:
        answers = _api_answers(stack.api_url)
        table.add_row("jobrelay up", f"pid {stack.pid}, API {stack.api_url}", _yes(answers))
        if not answers:
            problems.append(
                f"`jobrelay up` (pid {stack.pid}) runs but {stack.api_url} does not answer"
            )
    if settings.aws.endpoint_url:
        reachable = aws_reachable(settings)
        table.add_row("sqs/s3 endpoint", _endpoint_label(settings, stack), _yes(reachable))
        if not reachable:
            problems.append(f"the SQS/S3 endpoint {settings.aws.endpoint_url} does not answer")
    else:
        table.add_row("sqs/s3 endpoint", "not configured: `jobrelay up` starts the emulator", "-")
    console.print(table)
    pg_ctl = embedded_pg_ctl(settings)
    if pg_ctl is not None:  # how to stop or start the embedded server by hand, unwrapped
        console.print(f"embedded server control: {pg_ctl} stop|start", soft_wrap=True)
    for problem in problems:
        console.print(f"[red]problem:[/] {problem}")
    if problems:
        raise typer.Exit(1)


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def _api_answers(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _endpoint_label(settings: Settings, stack: RunningStack | None) -> str:
    """The endpoint URL, saying when it is the emulator a running `up` started."""
    url = settings.aws.endpoint_url or ""
    if stack is not None and stack.emulator_started and stack.aws_endpoint_url == url:
        return f"{url} (emulator started by `jobrelay up`, pid {stack.pid})"
    return url
