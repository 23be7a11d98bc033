"""The in-process worker on real PostgreSQL: outcomes, retries, fenced outputs, cancel."""

from __future__ import annotations

import itertools
import uuid

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs.enqueue import EnqueueRequest
from tests.jobs_support import eventually, fetch, row, running_worker, service

Pool = AsyncConnectionPool[Connection]


async def _ended(pool: Pool, job_id: uuid.UUID) -> dict | None:  # type: ignore[type-arg]
    found = await row(pool, job_id)
    return found if found["status"] in ("completed", "failed", "cancelled") else None


async def test_retryable_failures_follow_the_policy_then_fail(pool: Pool) -> None:
    """diag.fail policy: 3 attempts, full jitter: delay = jitter * min(4, 0.5 * 2**(n-1)).

    The jitter draws are injected (0.9, then 0.7) so each pending window is long enough to
    observe; that the draws are random is the unit table's business.
    """
    jobs = service(pool)
    e = await jobs.enqueue(EnqueueRequest("diag.fail", {"kind": "retryable"}))
    draws = itertools.chain([0.9, 0.7], itertools.repeat(0.5))
    async with running_worker(pool, jitter=lambda: next(draws)):
        for attempt, jitter in ((1, 0.9), (2, 0.7)):
            found = await eventually(
                lambda attempt=attempt: _pending_after(pool, e.id, attempt),
                what=f"retry {attempt}",
            )
            delay = (found["available_at"] - found["updated_at"]).total_seconds()
            expected = jitter * min(4.0, 0.5 * 2 ** (attempt - 1))
            assert expected - 0.01 <= delay <= expected + 0.05, (attempt, delay)
            assert found["failure_kind"] == "retryable"
            async with pool.connection() as conn:  # skip the wait, not the policy
                await conn.execute(
                    "UPDATE jobs SET available_at = now() WHERE id = %s AND attempt_count = %s",
                    (e.id, attempt),
                )
        final = await eventually(lambda: _ended(pool, e.id), what="final failure")
    assert final["status"] == "failed" and final["attempt_count"] == 3
    assert final["failure_kind"] == "retryable" and "attempt 3" in final["last_error"]


async def _pending_after(pool: Pool, job_id: uuid.UUID, attempt: int) -> dict | None:  # type: ignore[type-arg]
    found = await row(pool, job_id)
    ok = found["status"] == "pending" and found["attempt_count"] == attempt
    return found if ok else None


async def test_permanent_and_invalid_jobs_fail_at_once_and_an_unknown_type_waits(
    pool: Pool,
) -> None:
    jobs = service(pool)
    permanent = await jobs.enqueue(EnqueueRequest("diag.fail", {"kind": "permanent"}))
    async with pool.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO jobs (id, type, payload) VALUES "
            "(gen_random_uuid(), 'no.such.type', '{}'), "
            "(gen_random_uuid(), 'media.process', '{\"mediaId\": 5}') RETURNING id, type"
        )
        inserted = {r["type"]: r["id"] for r in await cur.fetchall()}
    async with running_worker(pool):
        for job_id in (permanent.id, inserted["media.process"]):
            ended = await eventually(lambda job_id=job_id: _ended(pool, job_id))
            assert ended["status"] == "failed", ended
            assert ended["failure_kind"] == "permanent" and ended["attempt_count"] == 1
    invalid = await row(pool, inserted["media.process"])
    assert "invalid payload" in invalid["last_error"]
    # No handler in this worker: never claimed (issue 24), left for a worker that has one.
    unknown = await row(pool, inserted["no.such.type"])
    assert (unknown["status"], unknown["attempt_count"]) == ("pending", 0), unknown


async def test_fenced_outputs_are_written_with_the_completion(pool: Pool) -> None:
    jobs = service(pool)
    m2 = await jobs.enqueue(
        EnqueueRequest("media.process", {"mediaId": "m", "revision": 2, "sourceId": "s"})
    )
    async with running_worker(pool):
        await eventually(lambda: _ended(pool, m2.id))
        m1 = await jobs.enqueue(
            EnqueueRequest("media.process", {"mediaId": "m", "revision": 1, "sourceId": "s"})
        )
        await eventually(lambda: _ended(pool, m1.id))
        sync = await jobs.enqueue(
            EnqueueRequest("source.sync", {"sourceId": "s", "syncKind": "full", "revision": 3})
        )
        await eventually(lambda: _ended(pool, sync.id))
    [state] = await fetch(pool, "SELECT * FROM media_processing_state")
    assert state["revision"] == 2 and state["job_id"] == m2.id  # older revision did not win
    assert (await row(pool, m1.id))["status"] == "completed"
    assert (await row(pool, m2.id))["result"]["tags"] == state["tags"]
    [synced] = await fetch(pool, "SELECT * FROM source_sync_state")
    assert (synced["revision"], synced["job_id"]) == (3, sync.id)


async def test_cancelling_a_running_job_stops_its_handler(pool: Pool) -> None:
    jobs = service(pool)
    e = await jobs.enqueue(EnqueueRequest("diag.sleep", {"seconds": 60}))
    async with running_worker(pool, lease_s=0.6) as worker:
        await eventually(lambda: _is(pool, e.id, "in_progress"))
        cancelled = await jobs.cancel(e.id)
        assert cancelled.status == "cancelled"
        await eventually(lambda: _true(worker.stats.lease_lost == 1), what="handler stopped")
        assert worker.stats.completed == 0
    assert (await row(pool, e.id))["status"] == "cancelled"


async def test_heartbeats_keep_a_long_job_alive(pool: Pool) -> None:
    jobs = service(pool)
    e = await jobs.enqueue(EnqueueRequest("diag.sleep", {"seconds": 1.0}))
    async with running_worker(pool, lease_s=0.3, rescue_interval_s=0.05) as worker:
        ended = await eventually(lambda: _ended(pool, e.id))
    assert ended["status"] == "completed" and ended["attempt_count"] == 1
    assert worker.rescuer.signals.acted == 0 and ended["heartbeat_at"] > ended["claimed_at"]


async def _is(pool: Pool, job_id: uuid.UUID, status: str) -> bool:
    return bool((await row(pool, job_id))["status"] == status)


async def _true(value: bool) -> bool:
    return value
