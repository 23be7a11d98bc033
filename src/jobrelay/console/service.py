"""`ConsoleService`: the console's overview and health readings, each taken in one
read-only snapshot of the database, with database time.

Every statement is bounded by what is in flight (pending and running jobs, the jobs
finished in the last hour, the relay's backlog, at most `MAX_BATCHES` batches in progress),
never by the size of the finished history; docs/reference/console.md lists the index each
one reads and the one place (batches in progress) that reads a whole table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.batches.service import BatchView, processing_batches
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import BatchCounts

_SQL = Queries("jobrelay.console")

MAX_BATCHES = 50
"""Batches in progress listed by the overview, oldest first."""

HEALTH_TABLES = (
    "jobs",
    "batch",
    "batch_item",
    "page_import",
    "code2des",
    "code2wf",
    "worker_heartbeat",
)
QUERY_CHARS = 200
"""How much of the oldest transaction's current query the health reading shows."""


@dataclass(frozen=True, slots=True)
class TypeStatusCount:
    """Jobs of one type in one status: pending and in_progress now; completed, failed and
    cancelled among the jobs finished in the last hour (`last_5m` of them in 5 minutes)."""

    type: str
    status: str
    count: int
    last_5m: int | None = None


@dataclass(frozen=True, slots=True)
class ClassLoad:
    """One concurrency class: running jobs against its global cap, the available backlog
    and the workers that serve it."""

    concurrency_class: str
    running: int
    global_cap: int | None
    holding_slots: int
    lease_expired: int
    available: int
    oldest_available_at: dt.datetime | None
    oldest_available_age_s: float | None
    workers_live: int
    workers_stale: int
    live_slots: int
    last_heartbeat_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class FinishedCounts:
    completed_5m: int
    failed_5m: int
    completed_60m: int
    failed_60m: int


@dataclass(frozen=True, slots=True)
class ControlFlags:
    claims_paused: bool
    enqueue_paused: bool
    reason: str | None
    updated_by: str
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class BatchProgress:
    id: str
    organization_id: int
    project_id: int
    type: str
    created_at: dt.datetime
    counts: BatchCounts


@dataclass(frozen=True, slots=True)
class Overview:
    checked_at: dt.datetime
    jobs: list[TypeStatusCount]
    classes: list[ClassLoad]
    oldest_available_age_s: float | None
    finished: FinishedCounts
    control: ControlFlags
    batches: list[BatchProgress]
    more_batches: bool


@dataclass(frozen=True, slots=True)
class TableHealth:
    table: str
    live_tuples: int
    dead_tuples: int
    last_vacuum: dt.datetime | None
    last_autovacuum: dt.datetime | None
    last_analyze: dt.datetime | None
    last_autoanalyze: dt.datetime | None
    total_bytes: int


@dataclass(frozen=True, slots=True)
class OldestTransaction:
    pid: int
    application_name: str
    user_name: str | None
    state: str | None
    xact_start: dt.datetime | None
    xact_age_s: float | None
    xmin_age: int | None
    query: str


@dataclass(frozen=True, slots=True)
class LeaseLosses:
    failed_last_hour: int
    rescued_pending_last_hour: int
    expired_not_yet_rescued: int


@dataclass(frozen=True, slots=True)
class RelayLag:
    undispatched: int
    oldest_item_id: str | None
    oldest_batch_id: str | None
    oldest_created_at: dt.datetime | None
    oldest_dispatch_attempts: int | None
    lag_s: float


@dataclass(frozen=True, slots=True)
class Health:
    checked_at: dt.datetime
    tables: list[TableHealth]
    oldest_transaction: OldestTransaction | None
    lease_losses: LeaseLosses
    relay_lag: RelayLag


async def _rows(
    conn: Connection, query: Any, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    cursor = await conn.execute(query, params or {})
    return list(await cursor.fetchall())


async def _one(
    conn: Connection, query: Any, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    rows = await _rows(conn, query, params)
    assert len(rows) == 1, f"expected one row, got {len(rows)}"
    return rows[0]


async def read_only_snapshot(conn: Connection) -> None:
    """Make the caller's transaction one read-only snapshot (call first)."""
    await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


async def active_jobs(conn: Connection) -> list[TypeStatusCount]:
    """Pending and running jobs per (type, status)."""
    return [
        TypeStatusCount(type=r["type"], status=r["status"], count=int(r["n"]))
        for r in await _rows(conn, _SQL.active_jobs)
    ]


async def served_types(conn: Connection) -> frozenset[str] | None:
    """The job types some live worker has a handler for; None when a live worker serves
    every type (one of a release that does not list them) or no worker is live at all (then
    nothing is known to be unserved: the class metrics say no worker is live)."""
    [row] = await _rows(conn, _SQL.served_types)
    if row["every_type"] or not row["live"]:
        return None
    return frozenset(str(t) for t in row["types"])


async def finished_jobs(conn: Connection) -> list[TypeStatusCount]:
    """Jobs finished in the last hour per (type, status), with the last 5 minutes' share."""
    return [
        TypeStatusCount(
            type=r["type"],
            status=r["status"],
            count=int(r["last_60m"]),
            last_5m=int(r["last_5m"]),
        )
        for r in await _rows(conn, _SQL.finished_jobs)
    ]


async def class_loads(conn: Connection, global_caps: Mapping[str, int]) -> list[ClassLoad]:
    """Every class that has running or available jobs, live or stale workers, or a cap."""
    backlog = {r["cls"]: r for r in await _rows(conn, _SQL.class_backlog)}
    workers = {r["cls"]: r for r in await _rows(conn, _SQL.class_workers)}
    loads = []
    for cls in sorted({*backlog, *workers, *global_caps}):
        b = backlog.get(cls, {})
        w = workers.get(cls, {})
        loads.append(
            ClassLoad(
                concurrency_class=cls,
                running=int(b.get("running", 0)),
                global_cap=global_caps.get(cls),
                holding_slots=int(b.get("holding_slots", 0)),
                lease_expired=int(b.get("lease_expired", 0)),
                available=int(b.get("available", 0)),
                oldest_available_at=b.get("oldest_available_at"),
                oldest_available_age_s=b.get("oldest_available_age_s"),
                workers_live=int(w.get("live", 0)),
                workers_stale=int(w.get("stale", 0)),
                live_slots=int(w.get("live_slots", 0)),
                last_heartbeat_at=w.get("last_heartbeat_at"),
            )
        )
    return loads


async def control_flags(conn: Connection) -> tuple[ControlFlags, dt.datetime]:
    """The pause flags and the database time."""
    row = await _one(conn, _SQL.control_flags)
    flags = ControlFlags(
        claims_paused=bool(row["claims_paused"]),
        enqueue_paused=bool(row["enqueue_paused"]),
        reason=row["reason"],
        updated_by=str(row["updated_by"]),
        updated_at=row["updated_at"],
    )
    return flags, row["checked_at"]


async def table_health(
    conn: Connection, tables: Sequence[str] = HEALTH_TABLES
) -> list[TableHealth]:
    """Tuples, vacuum/analyze times and total size of `tables`."""
    return [
        TableHealth(
            table=r["table_name"],
            live_tuples=int(r["live_tuples"]),
            dead_tuples=int(r["dead_tuples"]),
            last_vacuum=r["last_vacuum"],
            last_autovacuum=r["last_autovacuum"],
            last_analyze=r["last_analyze"],
            last_autoanalyze=r["last_autoanalyze"],
            total_bytes=int(r["total_bytes"]),
        )
        for r in await _rows(conn, _SQL.table_health, {"tables": list(tables)})
    ]


async def oldest_transaction(conn: Connection) -> OldestTransaction | None:
    """The other session holding the oldest xmin (or open transaction), if any."""
    rows = await _rows(conn, _SQL.oldest_transaction, {"query_chars": QUERY_CHARS})
    if not rows:
        return None
    r = rows[0]
    return OldestTransaction(
        pid=int(r["pid"]),
        application_name=str(r["application_name"] or ""),
        user_name=r["user_name"],
        state=r["state"],
        xact_start=r["xact_start"],
        xact_age_s=r["xact_age_s"],
        xmin_age=None if r["xmin_age"] is None else int(r["xmin_age"]),
        query=str(r["query"] or ""),
    )


async def lease_losses(conn: Connection) -> LeaseLosses:
    """Lease losses of the last hour, derived from the jobs (no counter is kept)."""
    r = await _one(conn, _SQL.lease_losses)
    return LeaseLosses(
        failed_last_hour=int(r["failed_last_hour"]),
        rescued_pending_last_hour=int(r["rescued_pending_last_hour"]),
        expired_not_yet_rescued=int(r["expired_not_yet_rescued"]),
    )


async def relay_lag(conn: Connection) -> RelayLag:
    """The relay's backlog and the age of its oldest item (0 when there is none)."""
    r = await _one(conn, _SQL.relay_lag)
    return RelayLag(
        undispatched=int(r["undispatched"]),
        oldest_item_id=r["oldest_item_id"],
        oldest_batch_id=r["oldest_batch_id"],
        oldest_created_at=r["oldest_created_at"],
        oldest_dispatch_attempts=r["oldest_dispatch_attempts"],
        lag_s=float(r["lag_s"] or 0.0),
    )


def _finished_totals(finished: Sequence[TypeStatusCount]) -> FinishedCounts:
    def total(status: str, recent: bool) -> int:
        return sum((c.last_5m or 0) if recent else c.count for c in finished if c.status == status)

    return FinishedCounts(
        completed_5m=total("completed", True),
        failed_5m=total("failed", True),
        completed_60m=total("completed", False),
        failed_60m=total("failed", False),
    )


def _progress(view: BatchView) -> BatchProgress:
    return BatchProgress(
        id=view.id,
        organization_id=view.organization_id,
        project_id=view.project_id,
        type=view.type,
        created_at=view.created_at,
        counts=view.counts,
    )


@dataclass
class ConsoleService:
    """Read-only views for operators (admins): overview and health."""

    pool: AsyncConnectionPool[Connection]
    # The workers' JOBRELAY_JOBS_GLOBAL_CAPS as the API knows them (not in the database).
    global_caps: Mapping[str, int]

    async def overview(self, *, max_batches: int = MAX_BATCHES) -> Overview:
        """Jobs by type x status, load per class, the oldest available job's age, recent
        completions and failures, the pause flags and batches in progress."""
        async with transaction(self.pool) as conn:
            await read_only_snapshot(conn)
            control, checked_at = await control_flags(conn)
            active = await active_jobs(conn)
            finished = await finished_jobs(conn)
            classes = await class_loads(conn, self.global_caps)
            # Last: the batch counts turn hash joins off for the rest of the transaction.
            batches = await processing_batches(conn, limit=max_batches + 1)
        ages = [c.oldest_available_age_s for c in classes if c.oldest_available_age_s is not None]
        return Overview(
            checked_at=checked_at,
            jobs=[*active, *finished],
            classes=classes,
            oldest_available_age_s=max(ages) if ages else None,
            finished=_finished_totals(finished),
            control=control,
            batches=[_progress(b) for b in batches[:max_batches]],
            more_batches=len(batches) > max_batches,
        )

    async def health(self) -> Health:
        """Table statistics, the oldest transaction, lease losses and the relay's lag."""
        async with transaction(self.pool) as conn:
            await read_only_snapshot(conn)
            _, checked_at = await control_flags(conn)
            return Health(
                checked_at=checked_at,
                tables=await table_health(conn),
                oldest_transaction=await oldest_transaction(conn),
                lease_losses=await lease_losses(conn),
                relay_lag=await relay_lag(conn),
            )
