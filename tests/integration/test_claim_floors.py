"""Claim floors (issue 27): with a pinned xmin horizon, the entries of claimed jobs stay in
the pending indexes; a claim with floors does not read them, and a job that went back
behind a floor is still claimed after the refresh it asks for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.floors import BEHIND, ClaimFloors
from tests.jobs_support import service

Pool = AsyncConnectionPool[Connection]
LIMITS = QueueLimits(lease_s=30, total=10)


async def _add_pending(conn: Connection, n: int) -> None:
    await conn.execute(
        # One available_at per job, as jobs enqueued one by one get (a bulk enqueue shares
        # its transaction's: the floor is a time, so it cannot skip within one instant).
        "INSERT INTO jobs (id, type, payload, available_at)"
        " SELECT gen_random_uuid(), 'diag.noop', '{}', clock_timestamp()"
        " FROM generate_series(1, %s)",
        (n,),
    )


async def _churn(conn: Connection, jobs: int) -> None:
    """Claim and complete `jobs` jobs, 100 at a time, enqueueing as many (the backlog stays):
    two dead versions per job that a pinned horizon keeps."""
    for _ in range(0, jobs, 100):
        taken = await claims.claim(
            conn, LIMITS, worker_id="churn", total=100, wanted={"default": 100}
        )
        await conn.execute(
            "UPDATE jobs SET status = 'completed', claim_token = NULL, lease_expires_at = NULL,"
            " finished_at = clock_timestamp() WHERE id = ANY(%s)",
            ([job.id for job in taken],),
        )
        await _add_pending(conn, len(taken))


async def _entries_read(conn: Connection, floors: dict[str, datetime] | None) -> int:
    """Index entries one worker claim of 10 jobs reads (the statistics of every index of
    `jobs`, flushed), rolled back. Entries, not buffers: consecutive entries on one heap
    page cost one buffer, but a visibility check each."""

    async def read_so_far() -> int:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cursor = await conn.execute(
            "SELECT sum(idx_tup_read)::bigint AS n FROM pg_stat_user_indexes WHERE relname = 'jobs'"
        )
        found = await cursor.fetchone()
        assert found is not None
        return int(found["n"])

    before = await read_so_far()
    async with conn.transaction(force_rollback=True):
        # As the worker claims: its free slots per class given (`wanted`).
        taken = await claims.claim(
            conn, LIMITS, worker_id="w1", wanted={"default": 10}, floors=floors
        )
        assert len(taken) == 10
    return await read_so_far() - before


async def _pinned_claim_reads(pool: Pool, backlog: int, churn: int) -> tuple[int, int]:
    """(without floors, with floors) after `churn` jobs went through a `backlog` while a
    REPEATABLE READ transaction held its snapshot and an xid."""
    assert isinstance(pool.conninfo, str)
    async with (
        await psycopg.AsyncConnection.connect(pool.conninfo, autocommit=True) as pin,
        pool.connection() as conn,
    ):
        await _add_pending(conn, backlog)
        await conn.execute("VACUUM ANALYZE jobs")
        await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await pin.execute("SELECT txid_current(), count(*) FROM all_jobs")
        await _churn(conn, churn)
        await conn.execute("VACUUM ANALYZE jobs")  # removes nothing the pin can still see
        await claims.configure_claim_session(conn)
        floors = dict(await ClaimFloors().refresh(conn, ["default"]))
        result = (await _entries_read(conn, None), await _entries_read(conn, floors))
        await conn.execute("RESET ALL")
        await pin.execute("ROLLBACK")
    return result


async def test_a_claim_with_floors_skips_what_a_pinned_horizon_keeps(pool: Pool) -> None:
    without, floored = await _pinned_claim_reads(pool, backlog=200, churn=5000)
    # 5,000 claimed jobs: without floors the claim reads each one's entry (and its heap row).
    assert without > 5000, without
    assert floored < 500, floored


@pytest.mark.long
async def test_the_claims_buffer_reads_do_not_depend_on_the_backlog(pool: Pool) -> None:
    # Acceptance of issue 27: a 100k backlog with a pinned xmin; the bound is the same as
    # for a backlog of 200 (plan shape, not timing).
    without, floored = await _pinned_claim_reads(pool, backlog=100_000, churn=20_000)
    assert without > 20_000, without
    assert floored < 500, floored


async def test_a_job_behind_the_floor_is_claimed_after_the_refresh_it_asks_for(
    pool: Pool,
) -> None:
    floors = ClaimFloors(refresh_s=0.0, full_refresh_s=3600.0)
    async with pool.connection() as conn:
        await _add_pending(conn, 3)
        await floors.refresh(conn, ["default"])
        taken = await claims.claim(conn, LIMITS, worker_id="w1", floors=floors.current(["default"]))
        assert len(taken) == 3
    # Released or rescued jobs keep their old place in the queue; so does a runAt in the
    # past: behind the floor, and further back than an incremental refresh looks.
    old = datetime.now(UTC) - timedelta(hours=2)
    await service(pool).enqueue(EnqueueRequest("diag.noop", {"late": True}, run_at=old))
    async with pool.connection() as conn:
        current = await floors.refresh(conn, ["default"])
        assert await claims.claim(conn, LIMITS, worker_id="w1", floors=current) == []
        floors.noticed(BEHIND)  # what release and rescue send
        current = await floors.refresh(conn, ["default"])
        [job] = await claims.claim(conn, LIMITS, worker_id="w1", floors=current)
    assert job.payload == {"late": True}


async def test_a_job_due_now_is_not_behind_a_floor_set_by_a_job_due_later(pool: Pool) -> None:
    # The only pending jobs of the class are due later (a waiting batch parent, a runAt in
    # an hour) while the rest of the class runs: a floor at their available_at would hide
    # every job that becomes due before it (a retry with no backoff, a new enqueue) until
    # the next full refresh. The floor never passes the database's clock.
    floors = ClaimFloors(refresh_s=0.0, full_refresh_s=3600.0)
    later = datetime.now(UTC) + timedelta(hours=1)
    await service(pool).enqueue(EnqueueRequest("diag.noop", {"later": True}, run_at=later))
    async with pool.connection() as conn:
        current = await floors.refresh(conn, ["default"])
        assert current["default"] < datetime.now(UTC), current
    await service(pool).enqueue(EnqueueRequest("diag.noop", {"now": True}))
    async with pool.connection() as conn:
        current = await floors.refresh(conn, ["default"])
        [job] = await claims.claim(conn, LIMITS, worker_id="w1", floors=current)
    assert job.payload == {"now": True}
