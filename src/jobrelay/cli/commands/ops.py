"""`jobrelay ops …`: quiesce, duplicate reconciliation, the SET LOGGED runbook, checks.

Every command prints JSON on stdout. A refused or aborted runbook also prints one line on
stderr naming the reason and exits with code 2.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import typer
from psycopg_pool import AsyncConnectionPool
from pydantic.alias_generators import to_camel

from jobrelay.batches.verify import verify_all
from jobrelay.bootstrap import build_services, database, jobs_registry
from jobrelay.cli.running_stack import load_cli_settings
from jobrelay.domain.errors import InvalidInput, JobrelayError
from jobrelay.ops.check import check, create_dedupe_index
from jobrelay.ops.control import control_status, set_pause
from jobrelay.ops.duplicates import plan_as_json, reconcile_duplicates, registry_policies
from jobrelay.ops.finished import move_finished
from jobrelay.ops.logged import set_logged

ops_app = typer.Typer(help="Operations: quiesce, reconcile duplicates, SET LOGGED, checks.")
ACTOR = "ops"


class RunbookStopped(JobrelayError):
    """The runbook refused or aborted; the report was printed."""


def register(app: typer.Typer) -> None:
    app.add_typer(ops_app, name="ops")


def _run(action: Callable[[AsyncConnectionPool[Any]], Awaitable[Any]]) -> Any:
    settings = load_cli_settings()

    async def go(dsn: str) -> Any:
        async with build_services(settings, dsn, bounded_calls=False) as services:
            return await action(services.pool)

    with database(settings) as dsn:
        return asyncio.run(go(dsn))


def _print(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def _control_json(row: dict[str, Any]) -> dict[str, Any]:
    """The control row (snake_case columns) as the camelCase JSON every command prints."""
    return {to_camel(key): value for key, value in row.items()}


def parse_duration(text: str) -> float:
    """`5s`, `500ms`, `2m` or a plain number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", text)
    if not match:
        raise InvalidInput(f"--lock-timeout {text!r} is not a duration like 5s, 500ms or 1m")
    value, unit = float(match.group(1)), match.group(2) or "s"
    seconds = value / 1000 if unit == "ms" else value * 60 if unit == "m" else value
    if seconds <= 0:
        raise InvalidInput(f"--lock-timeout {text!r} must be positive")
    return seconds


@ops_app.command("pause")
def pause(
    reason: str = typer.Option("quiesce", "--reason", help="Why, shown by `ops status`."),
    claims_only: bool = typer.Option(False, "--claims-only", help="Keep accepting enqueues."),
) -> None:
    """Stop claiming (workers idle) and refuse enqueues."""
    row = _run(
        lambda pool: set_pause(
            pool, claims=True, enqueue=not claims_only, reason=reason, actor=ACTOR
        )
    )
    _print(_control_json(row))


@ops_app.command("resume")
def resume() -> None:
    """Resume claiming and enqueueing."""
    row = _run(lambda pool: set_pause(pool, claims=False, enqueue=False, reason=None, actor=ACTOR))
    _print(_control_json(row))


@ops_app.command("status")
def status() -> None:
    """Pause flags, live leases, pending jobs per type."""
    _print(_control_json(_run(control_status)))


@ops_app.command("check")
def check_command() -> None:
    """Persistence of every table, the dedupe index, duplicate groups (exit 1 if not ok)."""
    result = _run(check)
    _print(result)
    if not result["ok"]:
        raise typer.Exit(1)


@ops_app.command("verify-counts")
def verify_counts_command(
    batch: str | None = typer.Option(None, "--batch", help="Only this batch (its id)."),
    repair: bool = typer.Option(
        False, "--repair", help="Correct every drift found, in the transaction that found it."
    ),
) -> None:
    """Compare every batch's kept counts with the recount from its items and children (one
    snapshot per batch); exit 1 when a drift was found and not repaired."""

    async def action(pool: AsyncConnectionPool[Any]) -> dict[str, Any]:
        checked, drifts = await verify_all(pool, batch_id=batch, repair=repair)
        if batch is not None and checked == 0:
            raise InvalidInput(f"no batch {batch!r}")
        return {"checked": checked, "drifted": [d.as_json() for d in drifts]}

    result = _run(action)
    _print(result)
    if result["drifted"] and not repair:
        raise typer.Exit(1)


@ops_app.command("reconcile-duplicates")
def reconcile_command(
    apply: bool = typer.Option(False, "--apply", help="Carry out the plan (one transaction)."),
    create_index: bool = typer.Option(
        False, "--create-index", help="Afterwards create the dedupe index CONCURRENTLY if missing."
    ),
) -> None:
    """Plan (dry run) or apply the reconciliation of active duplicates."""

    async def action(pool: AsyncConnectionPool[Any]) -> dict[str, Any]:
        policies = registry_policies(jobs_registry(load_cli_settings()))
        plan = await reconcile_duplicates(pool, policies, apply=apply)
        result = {"applied": apply, **plan_as_json(plan)}
        if create_index:
            if not apply and plan.groups:
                raise InvalidInput("--create-index needs --apply while duplicates remain")
            result["dedupeIndex"] = await create_dedupe_index(pool)
        return result

    _print(_run(action))


@ops_app.command("set-logged")
def set_logged_command(
    table: str = typer.Option("jobs", "--table", help="Table to convert."),
    lock_timeout: str = typer.Option("5s", "--lock-timeout", help="Give up waiting after this."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Pre-flight and measurements only."),
    report_file: Path | None = typer.Option(None, "--report", help="Also write the JSON here."),
) -> None:
    """Convert an UNLOGGED table with ALTER TABLE … SET LOGGED, following the runbook."""
    timeout_s = parse_duration(lock_timeout)
    report = _run(
        lambda pool: set_logged(pool, table=table, lock_timeout_s=timeout_s, dry_run=dry_run)
    )
    _print(report)
    if report_file is not None:
        report_file.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if not report["ok"]:
        raise RunbookStopped(f"set-logged {report['outcome']}: {report['message']}")


@ops_app.command("move-finished")
def move_finished_command(
    batch: int = typer.Option(5000, "--batch", min=1, help="Jobs moved per transaction."),
) -> None:
    """Move the jobs finished in place (legacy rows, or an earlier release's) from `jobs` to
    `finished_jobs` now, checking the count and checksum of every finished job."""
    report = _run(lambda pool: move_finished(pool, batch=batch))
    _print(report)
    if not report["ok"]:
        raise RunbookStopped(f"move-finished {report['outcome']}: {report['message']}")
