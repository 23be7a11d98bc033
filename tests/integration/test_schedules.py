"""The schedule ticker against real PostgreSQL: the tick statement under concurrent
connections (each tick enqueued once, a locked schedule skipped not waited for, a failed
tick rolled back), the upsert at worker start, and a worker ticking a 1-second schedule."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Paused
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.schedules import Schedule
from jobrelay.jobs.ticker import list_schedules, sync_schedules, tick_once
from jobrelay.jobs.worker import Worker, WorkerConfig
from tests.jobs_support import build_registry, eventually, fetch

EVERY_SECOND = Schedule(name="every-second", cron="* * * * * *", job_type="diag.noop")
NIGHTLY = Schedule(name="nightly", cron="0 3 * * *", job_type="diag.noop", timezone="Europe/Paris")


def enqueuer() -> Enqueuer:
    return Enqueuer(build_registry(), payload_limit_bytes=256 * 1024)


async def schedule_row(pool: AsyncConnectionPool[Connection], name: str) -> dict[str, Any]:
    (found,) = await fetch(pool, "SELECT * FROM job_schedules WHERE name = %s", name)
    return found


async def scheduled_keys(pool: AsyncConnectionPool[Connection]) -> list[str]:
    rows = await fetch(
        pool, "SELECT dedupe_key FROM all_jobs WHERE dedupe_key LIKE 'schedule:%%' ORDER BY 1"
    )
    return [str(r["dedupe_key"]) for r in rows]


async def set_next_tick(pool: AsyncConnectionPool[Connection], name: str, sql_expr: str) -> None:
    async with pool.connection() as conn:
        # The expression is a literal of this test module (database time arithmetic).
        await conn.execute(
            "UPDATE job_schedules SET next_tick_at = date_trunc('second', now()) - %s::interval"
            " WHERE name = %s",
            (sql_expr, name),
        )


async def test_a_new_schedule_starts_at_its_first_tick_and_a_restart_keeps_its_state(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with pool.connection() as conn:
        await sync_schedules(conn, [NIGHTLY])
    first = await schedule_row(pool, "nightly")
    assert first["last_tick_at"] is None
    local = first["next_tick_at"].astimezone(NIGHTLY.zone())
    assert (local.hour, local.minute, local.second) == (3, 0, 0)
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE job_schedules SET next_tick_at = next_tick_at - interval '3 days'"
        )
        await sync_schedules(conn, [NIGHTLY])  # same declaration: the durable state stays
    again = await schedule_row(pool, "nightly")
    assert again["next_tick_at"] == first["next_tick_at"] - dt.timedelta(days=3)
    assert again["updated_at"] == first["updated_at"]
    changed = Schedule(name="nightly", cron="0 4 * * *", job_type="diag.noop")
    async with pool.connection() as conn:
        await sync_schedules(conn, [changed])  # a new cron restarts from its first tick
        (stored,) = await list_schedules(conn)
    assert stored.cron == "0 4 * * *" and stored.timezone == "UTC"
    assert stored.next_tick_at.astimezone(dt.UTC).hour == 4


async def test_concurrent_tickers_enqueue_each_due_tick_exactly_once(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with pool.connection() as conn:
        await sync_schedules(conn, [EVERY_SECOND])
    await set_next_tick(pool, "every-second", "3 seconds")  # 4 ticks due, all on time
    engine = enqueuer()

    async def ticker() -> int:
        total = 0
        async with pool.connection() as conn:
            while (
                count := await tick_once(conn, engine, ["every-second"], grace_s=60)
            ) is not None:
                total += count
        return total

    counts = await asyncio.gather(*(ticker() for _ in range(6)))
    keys = await scheduled_keys(pool)
    assert sum(counts) == len(keys) >= 4
    assert len(set(keys)) == len(keys)
    ticks = [dt.datetime.fromisoformat(k.removeprefix("schedule:every-second:")) for k in keys]
    assert all(b - a == dt.timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    row = await schedule_row(pool, "every-second")
    assert row["last_tick_at"] == ticks[-1]
    assert row["next_tick_at"] == ticks[-1] + dt.timedelta(seconds=1)
    (last_job,) = await fetch(
        pool, "SELECT dedupe_key FROM all_jobs WHERE id = %s", row["last_job_id"]
    )
    assert last_job["dedupe_key"] == keys[-1]


async def test_a_schedule_locked_by_one_ticker_is_skipped_by_another_not_waited_for(
    db_dsn: str, pool: AsyncConnectionPool[Connection]
) -> None:
    async with pool.connection() as conn:
        await sync_schedules(conn, [EVERY_SECOND])
    await set_next_tick(pool, "every-second", "1 second")
    engine = enqueuer()
    holder = await psycopg.AsyncConnection.connect(db_dsn, row_factory=dict_row)
    try:
        async with holder.transaction():
            locked = await holder.execute(
                Queries("jobrelay.jobs").lock_due_schedule, {"names": ["every-second"]}
            )
            assert (await locked.fetchone()) is not None
            async with pool.connection() as conn:
                # A deadline, not a timing claim: a waiting ticker would hang here.
                skipped = await asyncio.wait_for(
                    tick_once(conn, engine, ["every-second"], grace_s=60), timeout=10
                )
            assert skipped is None
            assert await scheduled_keys(pool) == []
        # The holder rolled back without enqueueing: the tick is still due, and runs once.
        async with pool.connection() as conn:
            assert (await tick_once(conn, engine, ["every-second"], grace_s=60) or 0) >= 2
        assert len(await scheduled_keys(pool)) >= 2
    finally:
        await holder.close()


async def test_a_tick_whose_enqueue_fails_is_rolled_back_and_runs_later(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with pool.connection() as conn:
        await sync_schedules(conn, [EVERY_SECOND])
    await set_next_tick(pool, "every-second", "2 seconds")
    before = await schedule_row(pool, "every-second")
    engine = enqueuer()
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = true")
        try:
            await tick_once(conn, engine, ["every-second"], grace_s=60)
        except Paused:
            pass
        else:
            raise AssertionError("a paused enqueue must fail the tick")
    after = await schedule_row(pool, "every-second")
    assert after["next_tick_at"] == before["next_tick_at"] and after["last_tick_at"] is None
    assert await scheduled_keys(pool) == []
    async with pool.connection() as conn:
        await conn.execute("UPDATE jobs_control SET enqueue_paused = false")
        assert (await tick_once(conn, engine, ["every-second"], grace_s=60) or 0) >= 3


GRACE_S = 30


async def test_missed_ticks_follow_the_catch_up_policy(
    pool: AsyncConnectionPool[Connection],
) -> None:
    one = Schedule(name="one", cron="* * * * * *", job_type="diag.noop", catch_up="one")
    skip = Schedule(name="skip", cron="* * * * * *", job_type="diag.noop", catch_up="skip")
    async with pool.connection() as conn:
        await sync_schedules(conn, [one, skip])
    await set_next_tick(pool, "one", "1 hour")
    await set_next_tick(pool, "skip", "1 hour")
    engine = enqueuer()
    async with pool.connection() as conn:
        while await tick_once(conn, engine, ["one", "skip"], grace_s=GRACE_S) is not None:
            pass
    rows = await fetch(
        pool,
        "SELECT dedupe_key, created_at FROM all_jobs WHERE dedupe_key LIKE 'schedule:%%'"
        " ORDER BY dedupe_key",
    )
    lateness: dict[str, list[float]] = {"one": [], "skip": []}
    for r in rows:
        _, name, tick = str(r["dedupe_key"]).split(":", 2)
        # created_at is the database time of the ticking transaction (the plan's `now`).
        lateness[name].append((r["created_at"] - dt.datetime.fromisoformat(tick)).total_seconds())
    # The ticks of the last GRACE_S seconds are on time and each got a job; of the 3,600-odd
    # missed ticks, `one` enqueued ONE job (the latest missed tick), `skip` none. The grace is
    # long so that a stall of the loop on a loaded machine cannot make an on-time tick late.
    late_one = [x for x in lateness["one"] if x > GRACE_S]
    assert len(late_one) == 1
    assert GRACE_S < late_one[0] <= GRACE_S + 1
    assert [x for x in lateness["skip"] if x > GRACE_S] == []
    assert len([x for x in lateness["one"] if x <= GRACE_S]) >= 2
    assert len(lateness["skip"]) >= 2
    for name in ("one", "skip"):
        row = await schedule_row(pool, name)
        assert row["next_tick_at"] > row["last_tick_at"]


async def test_a_worker_ticks_a_one_second_schedule(pool: AsyncConnectionPool[Connection]) -> None:
    types = JobTypes()
    types.schedule("every-second", cron="* * * * * *", job_type="diag.noop")
    worker = Worker(
        pool=pool,
        registry=build_registry(extra=types),
        config=WorkerConfig(concurrency=2, poll_interval_s=0.05),
    )
    await worker.start()
    try:

        async def three() -> list[str] | None:
            keys = await scheduled_keys(pool)
            return keys if len(keys) >= 3 else None

        keys = await eventually(three, timeout_s=30, what="three ticks")
    finally:
        await worker.stop()
    ticks = [dt.datetime.fromisoformat(k.removeprefix("schedule:every-second:")) for k in keys]
    assert all(b - a == dt.timedelta(seconds=1) for a, b in itertools.pairwise(ticks))


async def test_a_stored_schedule_whose_job_is_refused_drops_its_tick_and_blocks_no_other(
    pool: AsyncConnectionPool[Connection],
) -> None:
    other = Schedule(name="other", cron="* * * * * *", job_type="diag.noop")
    async with pool.connection() as conn:
        await sync_schedules(conn, [EVERY_SECOND, other])
        # Written by another version of the deployment: diag.sleep refuses a negative time.
        await conn.execute(
            "UPDATE job_schedules SET job_type = 'diag.sleep', payload = '{\"seconds\": -5}'"
            " WHERE name = 'every-second'"
        )
    await set_next_tick(pool, "every-second", "2 seconds")
    await set_next_tick(pool, "other", "1 second")
    engine = enqueuer()
    async with pool.connection() as conn:
        counts = []
        while (
            count := await tick_once(conn, engine, ["every-second", "other"], grace_s=60)
        ) is not None:
            counts.append(count)
    keys = await scheduled_keys(pool)
    assert keys and all(k.startswith("schedule:other:") for k in keys)
    refused = await schedule_row(pool, "every-second")
    assert refused["next_tick_at"] > refused["last_tick_at"] and refused["last_job_id"] is None
