"""A lease expires and a second worker claims the job: everything the first worker still
tries (heartbeat, completion with business outputs, failure, retry, release) is rejected
and the second claim's row and outputs stay as they are. Two independent pools."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, open_pool
from jobrelay.domain.jobs import FailureKind, LeaseLost
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.registry import JobContext
from tests.jobs_support import build_registry, eventually, fetch, row, service

Pool = AsyncConnectionPool[Connection]


async def _outputs_of(registry_pool: Pool, job: claims.ClaimedJob):  # type: ignore[no-untyped-def,name-defined]
    """Run the real media.process handler for `job`; returns its Complete outcome."""
    entry = build_registry(diag_enabled=False).get("media.process")
    assert entry is not None and entry.handler is not None
    payload = entry.payload_model.model_validate({**job.payload, "type": "media.process"})
    return await entry.handler(JobContext(job, payload))


async def test_stale_worker_is_fenced_off_completely(pool: Pool, db_dsn: str) -> None:
    old_pool = await open_pool(db_dsn, min_size=1, max_size=2)
    new_pool = await open_pool(db_dsn, min_size=1, max_size=2)
    try:
        e = await service(pool).enqueue(
            EnqueueRequest("media.process", {"mediaId": "m", "revision": 3, "sourceId": "s"})
        )
        async with old_pool.connection() as conn:
            [old] = await claims.claim(conn, QueueLimits(lease_s=0.2, total=1), worker_id="old")
        old_outcome = await _outputs_of(old_pool, old)  # computed, not yet recorded

        async with new_pool.connection() as conn:
            await eventually(lambda: claims.rescue_expired(conn), what="lease expiry")
            [new] = await claims.claim(conn, QueueLimits(lease_s=30, total=1), worker_id="new")
        assert new.id == old.id and new.claim_token != old.claim_token

        new_outcome = await _outputs_of(new_pool, new)
        status = await claims.complete_fenced(
            new_pool, new, result=new_outcome.result, outputs=new_outcome.outputs
        )
        assert status is claims.Completion.COMPLETED
        row_after_new = await row(pool, e.id)
        state_after_new = await fetch(pool, "SELECT * FROM media_processing_state")

        async with old_pool.connection() as conn:
            for attempt in (
                lambda: claims.heartbeat(conn, old, lease_s=30),
                lambda: claims.fail(conn, old, kind=FailureKind.RETRYABLE, error="old"),
                lambda: claims.retry_later(conn, old, delay_s=0, error="old"),
                lambda: claims.release(conn, old),
            ):
                try:
                    await attempt()
                except LeaseLost:
                    continue
                raise AssertionError("a stale write was accepted")
        try:
            await claims.complete_fenced(
                old_pool, old, result={"stale": True}, outputs=old_outcome.outputs
            )
        except LeaseLost:
            pass
        else:
            raise AssertionError("a stale completion was accepted")

        assert await row(pool, e.id) == row_after_new
        assert await fetch(pool, "SELECT * FROM media_processing_state") == state_after_new
        assert state_after_new[0]["job_id"] == e.id
        assert row_after_new["claimed_by"] == "new" and row_after_new["status"] == "completed"
    finally:
        await old_pool.close()
        await new_pool.close()
