"""The schedule ticker: every worker runs one; each tick is enqueued once across all.

At start a worker upserts the schedules it declares into `job_schedules`
(`sync_schedules`). Its `ScheduleTicker` loop then, per due schedule, in ONE transaction:
locks the row (`next_tick_at <= now()`, `FOR UPDATE SKIP LOCKED`: a row another worker is
ticking is skipped, not waited for), enqueues the tick's job through the engine's normal
enqueue (so the job type's dedupe and merge rules hold; a type without a dedupe key gets
`schedule:<name>:<tick>`), and advances `last_tick_at`/`next_tick_at`. The lock and the
advance in one transaction make the tick happen once whatever the number of workers; a
failure rolls back both, so a tick is never lost either. The last run is in the
database, so it survives restarts; what happens to ticks missed while no worker ran is
the schedule's catch-up policy (`jobrelay.jobs.schedules.plan`).

The loop sleeps until the earliest next tick (database time), at most `max_wait_s` (so a
schedule whose next tick another worker moved is seen), at least `min_wait_s`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import InvalidInput
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.models import EnqueueRequest
from jobrelay.jobs.schedules import Schedule, dedupe_key, plan
from jobrelay.loops import Loop, positive

log = logging.getLogger("jobrelay.jobs.ticker")
_QUERIES = Queries("jobrelay.jobs")
DEFAULT_GRACE_S = 10.0
_MAX_PASS = 1000  # schedules one pass ticks before it rests


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A `job_schedules` row as `jobrelay schedules list` and the API show it."""

    name: str
    cron: str
    timezone: str
    job_type: str
    payload: Mapping[str, Any]
    catch_up: str
    last_tick_at: dt.datetime | None
    last_job_id: Any
    next_tick_at: dt.datetime
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredSchedule:
        return cls(**{name: row[name] for name in cls.__slots__})


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A schedule as `jobrelay schedules list` and `GET /v1/schedules` show it: its stored
    row (`stored`; a schedule no worker has started yet has no next tick), and whether
    this deployment's job types and settings declare it (`declared`; a stored schedule no
    longer declared stops ticking once no running worker declares it)."""

    name: str
    cron: str
    timezone: str
    job_type: str
    payload: Mapping[str, Any]
    catch_up: str
    next_tick_at: dt.datetime | None
    last_tick_at: dt.datetime | None
    last_job_id: Any
    declared: bool
    stored: bool


def schedule_views(
    stored: Iterable[StoredSchedule], declared: Iterable[Schedule]
) -> list[ScheduleView]:
    """Stored and declared schedules by name (a declared one shows its declaration)."""
    by_name = {s.name: s for s in declared}
    views: dict[str, ScheduleView] = {}
    for row in stored:
        views[row.name] = ScheduleView(
            name=row.name,
            cron=row.cron,
            timezone=row.timezone,
            job_type=row.job_type,
            payload=row.payload,
            catch_up=row.catch_up,
            next_tick_at=row.next_tick_at,
            last_tick_at=row.last_tick_at,
            last_job_id=row.last_job_id,
            declared=row.name in by_name,
            stored=True,
        )
    for name, schedule in by_name.items():
        if name not in views:
            views[name] = ScheduleView(
                name=name,
                cron=schedule.cron,
                timezone=schedule.timezone,
                job_type=schedule.job_type,
                payload=schedule.payload,
                catch_up=schedule.catch_up,
                next_tick_at=None,
                last_tick_at=None,
                last_job_id=None,
                declared=True,
                stored=False,
            )
    return [views[name] for name in sorted(views)]


async def sync_schedules(conn: Connection, schedules: Iterable[Schedule]) -> None:
    """Upsert the declared schedules (one transaction): new ones start at their first tick
    after the database's now; a changed cron or zone restarts there; others keep their
    durable last and next tick."""
    async with conn.transaction():
        cursor = await conn.execute(_QUERIES.schedule_clock)
        row = await cursor.fetchone()
        assert row is not None
        now = cast(dt.datetime, row["now"])
        for schedule in sorted(schedules, key=lambda s: s.name):  # one lock order
            await conn.execute(
                _QUERIES.upsert_schedule,
                {
                    "name": schedule.name,
                    "cron": schedule.cron,
                    "timezone": schedule.timezone,
                    "job_type": schedule.job_type,
                    "payload": Jsonb(dict(schedule.payload)),
                    "catch_up": schedule.catch_up,
                    "first_tick_at": schedule.next_after(now),
                },
            )


async def list_schedules(conn: Connection) -> list[StoredSchedule]:
    cursor = await conn.execute(_QUERIES.list_schedules)
    return [StoredSchedule.from_row(row) for row in await cursor.fetchall()]


async def tick_once(
    conn: Connection, enqueuer: Enqueuer, names: Iterable[str], *, grace_s: float
) -> int | None:
    """Tick ONE due schedule among `names` in one transaction; returns how many jobs it
    enqueued (0 when its missed ticks were skipped), None when none is due."""
    async with conn.transaction():
        cursor = await conn.execute(_QUERIES.lock_due_schedule, {"names": list(names)})
        row = await cursor.fetchone()
        if row is None:
            return None
        name = str(row["name"])
        schedule = Schedule(
            name=name,
            cron=str(row["cron"]),
            job_type=str(row["job_type"]),
            payload=cast(Mapping[str, Any], row["payload"]),
            timezone=str(row["timezone"]),
            catch_up=str(row["catch_up"]),
        )
        now = cast(dt.datetime, row["now"])
        due = plan(
            schedule, next_tick=cast(dt.datetime, row["next_tick_at"]), now=now, grace_s=grace_s
        )
        requests = [
            EnqueueRequest(
                type=schedule.job_type, payload=schedule.payload, dedupe_key=dedupe_key(name, t)
            )
            for t in due.enqueue
        ]
        try:
            results = await enqueuer.enqueue_many(conn, requests) if requests else []
        except InvalidInput as exc:
            # The stored row no longer fits the job types (another deployment's version
            # wrote it): this tick is dropped so the other schedules keep ticking.
            log.error("schedule %s: its job was refused, tick dropped: %s", name, exc)
            results = []
        await conn.execute(
            _QUERIES.advance_schedule,
            {
                "name": name,
                "last_tick_at": due.last_tick,
                "last_job_id": results[-1].id if results else None,
                "next_tick_at": due.next_tick,
            },
        )
    if due.missed:
        log.warning(
            "schedule %s: %d tick(s) missed while no worker ran (%s); catch-up %s: %s",
            name,
            due.missed,
            "or more" if due.missed >= 10_000 else "counted",
            schedule.catch_up,
            "one job" if due.caught_up is not None else "none enqueued",
        )
    log.debug("schedule %s ticked: %d job(s), next %s", name, len(results), due.next_tick)
    return len(results)


async def seconds_to_next_tick(conn: Connection, names: Iterable[str]) -> float | None:
    """Seconds until the earliest next tick among `names` (database time), None if none."""
    cursor = await conn.execute(_QUERIES.schedule_wait, {"names": list(names)})
    row = await cursor.fetchone()
    wait = None if row is None else row["wait_s"]
    return None if wait is None else float(cast(float, wait))


class ScheduleTicker(Loop):
    """Upserts the worker's schedules, then ticks due ones and sleeps until the next."""

    name = "schedule-ticker"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        schedules: Iterable[Schedule],
        enqueuer: Enqueuer,
        grace_s: float = DEFAULT_GRACE_S,
        max_wait_s: float = 5.0,
        min_wait_s: float = 0.01,
    ) -> None:
        super().__init__(interval_s=max_wait_s)
        self._pool = pool
        self._schedules = tuple(schedules)
        self._names = sorted(s.name for s in self._schedules)
        self._enqueuer = enqueuer
        self.grace_s = positive("grace_s", grace_s)
        self.min_wait_s = positive("min_wait_s", min_wait_s)
        self._wait = self.min_wait_s
        self._synced = False

    async def run_once(self) -> int:
        enqueued = 0
        async with self._pool.connection() as conn:
            if not self._synced:
                await sync_schedules(conn, self._schedules)
                self._synced = True
            for _ in range(_MAX_PASS):
                count = await tick_once(conn, self._enqueuer, self._names, grace_s=self.grace_s)
                if count is None:
                    break
                enqueued += count
            wait = await seconds_to_next_tick(conn, self._names)
        # Wake just after the earliest tick is due; a row another worker holds (not yet
        # advanced) reads as due, hence the floor.
        wait = self.interval_s if wait is None else wait + 0.002
        self._wait = min(self.interval_s, max(self.min_wait_s, wait))
        return enqueued

    async def _run(self) -> None:
        while not self._stopping.is_set():
            rest = await self._iterate()
            await self._rest(min(rest, self._wait))
