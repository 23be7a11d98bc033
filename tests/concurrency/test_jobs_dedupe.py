"""Active dedupe and merge under real concurrency: several independent connections (and a
worker with its own pool) against one PostgreSQL database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs import EnqueueOutcome, FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.claims import Done
from jobrelay.jobs.enqueue import EnqueueRequest
from tests.jobs_support import eventually, fetch, running_worker, service

Pool = AsyncConnectionPool[Connection]


async def _connect(dsn: str) -> Connection:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)


async def test_50_concurrent_enqueues_of_one_key_make_one_active_job(
    pool: Pool, db_dsn: str
) -> None:
    conns = [await _connect(db_dsn) for _ in range(5)]
    jobs = service(pool)
    payload = {"mediaId": "m1", "revision": 1, "sourceId": "s1"}
    start = asyncio.Event()
    locks = [asyncio.Lock() for _ in conns]

    async def client(i: int) -> uuid.UUID:
        await start.wait()
        async with locks[i % len(conns)]:
            result = await jobs.enqueue(
                EnqueueRequest("media.process", payload), conn=conns[i % len(conns)]
            )
        return result.id

    try:
        tasks = [asyncio.create_task(client(i)) for i in range(50)]
        start.set()
        ids = await asyncio.gather(*tasks)
    finally:
        for conn in conns:
            await conn.close()
    active = await fetch(pool, "SELECT id FROM all_jobs WHERE status IN ('pending', 'in_progress')")
    assert len(active) == 1
    assert set(ids) == {active[0]["id"]}


async def _blocked_on_lock(pool: Pool) -> bool:
    rows = await fetch(
        pool,
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    return bool(rows[0]["n"] >= 1)


async def _race(
    pool: Pool,
    db_dsn: str,
    request: EnqueueRequest,
    change: Callable[[Connection], Awaitable[None]],
    *,
    commit: bool,
) -> EnqueueOutcome:
    """Hold `change` of the active job open in one transaction, enqueue the same key from
    another connection (it must wait), then commit or roll back the change."""
    holder = await _connect(db_dsn)
    other = await _connect(db_dsn)
    try:
        tx = holder.transaction()
        await tx.__aenter__()
        await change(holder)
        racing = asyncio.create_task(service(pool).enqueue(request, conn=other))
        await eventually(lambda: _blocked_on_lock(pool), what="enqueue waiting on the row")
        assert not racing.done()
        if commit:
            await tx.__aexit__(None, None, None)
        else:
            await tx.__aexit__(RuntimeError, RuntimeError("rollback"), None)
        result = await racing
    finally:
        await holder.close()
        await other.close()
    active = await fetch(
        pool, "SELECT id, payload FROM all_jobs WHERE status IN ('pending', 'in_progress')"
    )
    assert len(active) == 1, active
    assert active[0]["id"] == result.id
    return result.outcome


DELTA = EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["new"]})


@pytest.mark.parametrize("ending", ["complete", "fail"])
async def test_enqueue_racing_the_end_of_the_active_job(
    pool: Pool, db_dsn: str, ending: str
) -> None:
    jobs = service(pool)
    await jobs.enqueue(EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["old"]}))
    async with pool.connection() as conn:
        [job] = await claims.claim(conn, QueueLimits(lease_s=30, total=1), worker_id="w")

    async def end(conn: Connection) -> None:
        if ending == "complete":
            await claims.complete_many(conn, [Done(job)])
        else:
            await claims.fail(conn, job, kind=FailureKind.PERMANENT, error="x")

    outcome = await _race(pool, db_dsn, DELTA, end, commit=True)
    assert outcome is EnqueueOutcome.CREATED  # a new job: the ended one could not take it
    [active] = await fetch(pool, "SELECT payload FROM all_jobs WHERE status = 'pending'")
    assert active["payload"]["mediaIds"] == ["new"]


async def test_enqueue_racing_a_rolled_back_insert(pool: Pool, db_dsn: str) -> None:
    async def insert(conn: Connection) -> None:
        await service(pool).enqueue(
            EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["lost"]}), conn=conn
        )

    outcome = await _race(pool, db_dsn, DELTA, insert, commit=False)
    assert outcome is EnqueueOutcome.CREATED


async def test_enqueue_racing_a_committed_insert_merges(pool: Pool, db_dsn: str) -> None:
    async def insert(conn: Connection) -> None:
        await service(pool).enqueue(
            EnqueueRequest("index.sync_delta", {"index": "i", "mediaIds": ["first"]}), conn=conn
        )

    outcome = await _race(pool, db_dsn, DELTA, insert, commit=True)
    assert outcome is EnqueueOutcome.MERGED
    [active] = await fetch(pool, "SELECT payload FROM all_jobs")
    assert active["payload"]["mediaIds"] == ["first", "new"]


async def test_20_clients_merge_1000_ids_while_a_worker_completes(pool: Pool, db_dsn: str) -> None:
    worker_pool = await open_pool(db_dsn, min_size=1, max_size=4)
    client_pool = await open_pool(db_dsn, min_size=4, max_size=8)
    jobs = service(client_pool)

    async def client(c: int) -> None:
        ids = [f"c{c:02d}-{n:02d}" for n in range(50)]
        for chunk in range(0, 50, 5):
            await jobs.enqueue(
                EnqueueRequest(
                    "index.sync_delta", {"index": "idx", "mediaIds": ids[chunk : chunk + 5]}
                )
            )

    try:
        async with running_worker(worker_pool, concurrency=2) as worker:
            await asyncio.gather(*(client(c) for c in range(20)))
            await eventually(
                lambda: _none_active(pool), timeout_s=60, what="all index deltas applied"
            )
    finally:
        await client_pool.close()
        await worker_pool.close()
    applied = await fetch(pool, "SELECT DISTINCT media_id FROM index_delta_applied")
    assert len(applied) == 1000
    twice = await fetch(
        pool,
        "SELECT media_id, job_id, job_revision FROM index_delta_applied "
        "GROUP BY 1, 2, 3 HAVING count(*) > 1",
    )
    assert twice == []
    assert worker.stats.completed >= 1


async def _none_active(pool: Pool) -> bool:
    rows = await fetch(
        pool, "SELECT count(*) AS n FROM all_jobs WHERE status IN ('pending', 'in_progress')"
    )
    return bool(rows[0]["n"] == 0)
