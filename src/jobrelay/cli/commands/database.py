"""`jobrelay migrate` and `jobrelay doctor`."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from jobrelay.bootstrap import aws_reachable, database, database_report
from jobrelay.settings import load_settings

console = Console()


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate_command)
    app.command("doctor")(doctor_command)


def migrate_command() -> None:
    """Bring the database to the newest schema (starts the embedded server if needed)."""
    settings = load_settings()
    with database(settings) as dsn:
        report = database_report(dsn)
    console.print(f"database at revision {report.current_revision} (head {report.head_revision})")


def doctor_command() -> None:
    """Check PostgreSQL version, migration head, table persistence and the SQS/S3 endpoint."""
    settings = load_settings()
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
    if settings.aws_endpoint_url:
        reachable = aws_reachable(settings)
        table.add_row("sqs/s3 endpoint", settings.aws_endpoint_url, "yes" if reachable else "no")
        if not reachable:
            problems.append(f"the SQS/S3 endpoint {settings.aws_endpoint_url} does not answer")
    else:
        table.add_row("sqs/s3 endpoint", "not configured: `jobrelay up` starts the emulator", "-")
    console.print(table)
    for problem in problems:
        console.print(f"[red]problem:[/] {problem}")
    if problems:
        raise typer.Exit(1)
