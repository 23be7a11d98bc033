"""A running job's failure and an operator's cancel race on two connections: whichever
commits first ends the attempt, the other changes nothing, and `job_attempts` holds exactly
one row for the attempt, from the winner (the cancel statement locks the row and re-reads
its status and token before recording; the worker's failure does not wait for a row the
cancel locks, it is deferred and then finds the claim gone)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import FailureKind, LeaseLost, RowLocked
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.enqueue import EnqueueRequest
from tests.jobs_support import eventually, fetch, service

Pool = AsyncConnectionPool[Connection]


async def _connect(dsn: str) -> Connection:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)


async def _blocked_on_lock(pool: Pool) -> bool:
    rows = await fetch(
        pool,
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    return bool(rows[0]["n"] >= 1)


@pytest.mark.parametrize("first", ["fail", "cancel"])
async def test_fail_and_cancel_record_one_attempt(pool: Pool, db_dsn: str, first: str) -> None:
    jobs = service(pool)
    job_id = (await jobs.enqueue(EnqueueRequest("diag.noop", {}))).id
    async with pool.connection() as conn:
        [claimed] = await claims.claim(conn, QueueLimits(lease_s=60.0, total=1), worker_id="w-race")
    holder = await _connect(db_dsn)
    other = await _connect(db_dsn)
    try:
        tx = holder.transaction()
        await tx.__aenter__()
        if first == "fail":
            await claims.fail(holder, claimed, kind=FailureKind.PERMANENT, error="boom")
            racing = asyncio.create_task(claims.cancel(other, job_id))
            await eventually(lambda: _blocked_on_lock(pool), what="the cancel waiting")
            assert not racing.done()
        else:
            assert await claims.cancel(holder, job_id) is not None
            # A worker's failure never waits for the row: it is deferred, nothing written.
            with pytest.raises(RowLocked):
                await claims.fail(other, claimed, kind=FailureKind.PERMANENT, error="boom")
        await tx.__aexit__(None, None, None)
        if first == "fail":
            assert await racing is None  # the job was no longer active
        else:
            with pytest.raises(LeaseLost):  # tried again once the cancel committed
                await claims.fail(other, claimed, kind=FailureKind.PERMANENT, error="boom")
    finally:
        await holder.close()
        await other.close()

    [job] = await fetch(pool, "SELECT status FROM all_jobs WHERE id = %s", job_id)
    attempts = await fetch(pool, "SELECT outcome, claim_token FROM job_attempts")
    expected = "failed" if first == "fail" else "cancelled"
    assert job["status"] == expected
    outcome = "permanent" if first == "fail" else "cancelled"
    assert attempts == [{"outcome": outcome, "claim_token": claimed.claim_token}]
