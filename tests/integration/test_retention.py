"""Retention of finished jobs on real PostgreSQL (migration 0017, `jobrelay.jobs.retention`):
a finished job leaves `jobs` for the `finished_jobs` partition of its purge day, created
ahead; a partition whose day is over is dropped whole with the attempts of its jobs; the
retention is per type; a reader holding a partition delays its drop to a later pass instead
of queueing the workers behind the pruner; a bad setting stops the worker with one line."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, retention
from jobrelay.jobs.claims import Done
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.retention import Retention
from tests.harness import run_cli
from tests.jobs_support import fetch, service

Pool = AsyncConnectionPool[Connection]
DAY = 86400.0


async def _finish(pool: Pool, job_type: str = "diag.noop", *, fail: bool = False) -> uuid.UUID:
    """Enqueue one job, claim it and complete (or fail) it; its id."""
    payload = {"seconds": 1} if job_type == "diag.sleep" else {"n": str(uuid.uuid4())}
    enqueued = await service(pool).enqueue(EnqueueRequest(job_type, payload))
    async with pool.connection() as conn:
        [claimed] = await claims.claim(
            conn, QueueLimits(lease_s=60.0, total=1, slots={"default": 1}), worker_id="w-ret"
        )
        assert claimed.id == enqueued.id
        if fail:
            await claims.fail(conn, claimed, kind=FailureKind.PERMANENT, error="gone")
        else:
            await claims.complete_many(conn, [Done(claimed)])
    return enqueued.id


async def _apply(pool: Pool, kept: Retention) -> retention.RetentionPass:
    async with pool.connection() as conn:
        return await retention.apply(conn, kept)


async def _partitions(pool: Pool) -> set[str]:
    rows = await fetch(
        pool,
        "SELECT inhrelid::regclass::text AS name FROM pg_inherits "
        "WHERE inhparent = 'finished_jobs'::regclass",
    )
    return {r["name"] for r in rows}


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _name(day: dt.date) -> str:
    return f"finished_jobs_p{day:%Y%m%d}"


async def test_partitions_are_created_ahead_and_a_finished_job_lands_in_its_day(
    pool: Pool,
) -> None:
    first = await _apply(pool, Retention(default_s=DAY))
    today = _utc_today()
    ahead = {_name(today + dt.timedelta(days=d)) for d in range(1, retention.DAYS_AHEAD + 2)}
    assert ahead <= await _partitions(pool)
    assert first.partitions_created >= retention.DAYS_AHEAD + 1
    assert (await _apply(pool, Retention(default_s=DAY))).partitions_created == 0

    job_id = await _finish(pool)
    [stored] = await fetch(
        pool,
        "SELECT tableoid::regclass::text AS part, purge_on, finished_at FROM finished_jobs "
        "WHERE id = %s",
        job_id,
    )
    assert (
        stored["purge_on"]
        == (stored["finished_at"] + dt.timedelta(days=1)).astimezone(dt.UTC).date()
    )
    assert stored["part"] == _name(stored["purge_on"])
    assert await fetch(pool, "SELECT id FROM jobs WHERE id = %s", job_id) == []


async def test_a_due_partition_is_dropped_with_the_attempts_of_its_jobs(pool: Pool) -> None:
    failed, kept = await _finish(pool, fail=True), await _finish(pool, fail=True)
    yesterday = _utc_today() - dt.timedelta(days=1)
    async with pool.connection() as conn:
        await conn.execute("SELECT jobrelay_finished_partition_v1(%s)", (yesterday,))
        await conn.execute(
            "UPDATE finished_jobs SET purge_on = %s WHERE id = %s", (yesterday, failed)
        )
    [moved] = await fetch(
        pool, "SELECT tableoid::regclass::text AS part FROM finished_jobs WHERE id = %s", failed
    )
    assert moved["part"] == _name(yesterday)

    done = await _apply(pool, Retention(default_s=DAY))
    assert (done.partitions_dropped, done.dropped, done.purged) == (1, 1, 0)
    assert _name(yesterday) not in await _partitions(pool)
    assert await fetch(pool, "SELECT id FROM all_jobs WHERE id = %s", failed) == []
    attempts = await fetch(pool, "SELECT job_id FROM job_attempts ORDER BY job_id")
    assert [r["job_id"] for r in attempts] == [kept]


async def test_retention_is_per_type_and_forever_is_never_purged(pool: Pool) -> None:
    kept = Retention(default_s=DAY, by_type={"diag.sleep": None, "diag.fail": 30 * DAY})
    await _apply(pool, kept)
    rows = await fetch(pool, "SELECT type, retention_s FROM job_retention ORDER BY type")
    assert {r["type"]: r["retention_s"] for r in rows} == {
        "*": 86400,
        "diag.fail": 30 * 86400,
        "diag.sleep": None,
    }
    month = _utc_today() + dt.timedelta(days=30)
    assert _name(month) in await _partitions(pool), "the 30-day type's days are created too"

    forever = await _finish(pool, "diag.sleep", fail=True)
    default = await _finish(pool)
    found = {
        r["id"]: r
        for r in await fetch(
            pool, "SELECT id, purge_on, tableoid::regclass::text AS part FROM finished_jobs"
        )
    }
    assert found[forever]["purge_on"] is None
    assert found[forever]["part"] == "finished_jobs_default"
    assert found[default]["purge_on"] is not None

    await _apply(pool, Retention(default_s=DAY))  # the type's own row goes with the setting
    assert [r["type"] for r in await fetch(pool, "SELECT type FROM job_retention")] == ["*"]
    async with pool.connection() as conn:  # years later: only the default partition's
        await conn.execute(
            "UPDATE finished_jobs SET purge_on = current_date - 400 WHERE id = %s", (default,)
        )
    done = await _apply(pool, kept)
    assert done.purged == 1
    left = await fetch(pool, "SELECT id FROM finished_jobs")
    assert [r["id"] for r in left] == [forever], "a job kept forever keeps its NULL day"


async def test_a_reader_holding_a_due_partition_delays_its_drop_without_blocking(
    pool: Pool,
) -> None:
    job_id = await _finish(pool)
    yesterday = _utc_today() - dt.timedelta(days=1)
    async with pool.connection() as conn:
        await conn.execute("SELECT jobrelay_finished_partition_v1(%s)", (yesterday,))
        await conn.execute(
            "UPDATE finished_jobs SET purge_on = %s WHERE id = %s", (yesterday, job_id)
        )
    async with pool.connection() as reader, reader.transaction():
        await reader.execute(f"SELECT count(*) FROM {_name(yesterday)}")
        held = await _apply(pool, Retention(default_s=DAY))
        assert held.partitions_dropped == 0, "it gave up on the lock instead of waiting"
        # The workers' statements were not queued behind the pruner: a job still finishes.
        await _finish(pool)
    assert _name(yesterday) in await _partitions(pool)
    released = await _apply(pool, Retention(default_s=DAY))
    assert (released.partitions_dropped, released.dropped) == (1, 1)


@pytest.mark.parametrize(
    ("value", "named"),
    [("audit.record=0d", "'0d'"), ("audit.record=soon", "'soon'"), ("=1d", "'=1d'")],
)
def test_a_bad_retention_setting_stops_the_worker_with_one_line(
    db_dsn: str, value: str, named: str
) -> None:
    result = run_cli("worker", DATABASE_URL=db_dsn, JOBRELAY_JOBS_RETENTION_BY_TYPE=value)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "JOBRELAY_JOBS_RETENTION_BY_TYPE" in line and named in line
