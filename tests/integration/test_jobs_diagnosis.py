""" "Why isn't this job running?" on real PostgreSQL: each state is built with the engine's
own statements (claims, retries, failures, pause, reconciliation, a real worker's
heartbeat) and the diagnosis must name the reason and the blocker."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.errors import NotFound
from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims, diagnosis, presence
from jobrelay.jobs.claims import Done
from jobrelay.jobs.diagnosis import Diagnosis, Reason
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import ClaimedJob
from jobrelay.ops.control import set_pause
from jobrelay.ops.duplicates import reconcile_duplicates, registry_policies
from tests.jobs_support import eventually, fetch, registry, running_worker, service

Pool = AsyncConnectionPool[Connection]
LIVE = "live-worker"


async def _why(pool: Pool, job_id: uuid.UUID, caps: Mapping[str, int] | None = None) -> Diagnosis:
    async with pool.connection() as conn:
        return await diagnosis.diagnose(conn, job_id, registry=registry(), global_caps=caps)


async def _live_worker(pool: Pool, worker_id: str = LIVE, **slots: int) -> None:
    """A worker's heartbeat row, as `Worker` writes it (the real loop is tested below)."""
    async with pool.connection() as conn:
        await presence.announce(
            conn,
            worker_id=worker_id,
            class_slots=slots or {"default": 4, "ai": 2},
            global_caps={},
            interval_s=10.0,
        )


async def _enqueue(
    pool: Pool, type_: str = "diag.noop", payload: dict[str, Any] | None = None, **kw: Any
) -> uuid.UUID:
    return (await service(pool).enqueue(EnqueueRequest(type_, payload or {}, **kw))).id


async def _claim(pool: Pool, worker: str = LIVE, **kw: Any) -> list[ClaimedJob]:
    async with pool.connection() as conn:
        return await claims.claim(conn, QueueLimits(lease_s=30.0, total=1, **kw), worker_id=worker)


async def test_pending_blockers_in_precedence_with_the_blocker_named(pool: Pool) -> None:
    await _live_worker(pool)
    claimable = await _enqueue(pool)
    why = await _why(pool, claimable)
    assert why.reason is Reason.CLAIMABLE and why.also == ()
    assert why.workers.live == (LIVE,) and "a worker should take it soon" in why.message

    delayed = await _enqueue(pool, delay_s=3600)
    why = await _why(pool, delayed)
    assert why.reason is Reason.DELAYED
    assert 3500 < why.wait_seconds <= 3600 and why.available_at > why.checked_at

    await set_pause(pool, claims=True, enqueue=False, reason="deploy", actor="ops")
    why = await _why(pool, delayed)
    assert why.reason is Reason.CLAIMS_PAUSED and why.also == (Reason.DELAYED,)
    assert why.pause.reason == "deploy" and why.pause.updated_by == "ops"
    assert "deploy" in why.message
    await set_pause(pool, claims=False, enqueue=False, reason=None, actor="ops")
    assert (await _why(pool, delayed)).reason is Reason.DELAYED

    await service(pool).cancel(claimable)  # out of the way of the claim below
    retried = await _enqueue(pool, payload={"n": 1})
    [job] = await _claim(pool)
    assert job.id == retried
    async with pool.connection() as conn:
        await claims.retry_later(conn, job, delay_s=600, error="TimeoutError: upstream")
    why = await _why(pool, retried)
    assert why.reason is Reason.BACKOFF and why.attempt_count == 1
    assert 500 < why.wait_seconds <= 600 and "TimeoutError: upstream" in why.message


async def test_busy_source_and_the_queue_of_a_source_name_the_job_ahead(pool: Pool) -> None:
    await _live_worker(pool)
    sleep = {"seconds": 1, "sourceKey": "source:7"}
    first = await _enqueue(pool, "diag.sleep", sleep)
    second = await _enqueue(pool, "diag.sleep", sleep)
    why = await _why(pool, second)
    assert why.reason is Reason.SOURCE_QUEUE
    assert [(b.id, b.status) for b in why.blocking_jobs] == [(first, "pending")]
    assert str(first) in why.message

    [running] = await _claim(pool, worker="w-busy")
    assert running.id == first
    why = await _why(pool, second)
    assert why.reason is Reason.SOURCE_BUSY and why.source_key == "source:7"
    [blocker] = why.blocking_jobs
    assert (blocker.id, blocker.status, blocker.claimed_by) == (first, "in_progress", "w-busy")
    assert blocker.lease_expires_at is not None and str(first) in why.message


async def test_class_at_its_global_cap_names_the_jobs_holding_the_slots(pool: Pool) -> None:
    await _live_worker(pool)
    ai = {"seconds": 1, "concurrencyClass": "ai"}
    holders = [await _enqueue(pool, "diag.sleep", {**ai, "seconds": i + 1}) for i in range(2)]
    waiting = await _enqueue(pool, "diag.sleep", {**ai, "seconds": 9})
    for _ in holders:
        await _claim(pool, slots={"ai": 1}, caps={"ai": 2})
    assert (await _why(pool, waiting)).reason is Reason.CLAIMABLE  # caps unknown: no cap
    why = await _why(pool, waiting, caps={"ai": 2})
    assert why.reason is Reason.CLASS_AT_CAP
    assert (why.global_cap, why.class_running) == (2, 2)
    assert [b.id for b in why.blocking_jobs] == holders
    assert [b.class_slot for b in why.blocking_jobs] == [1, 2]
    assert (await _why(pool, waiting, caps={"ai": 3})).reason is Reason.CLAIMABLE


async def test_no_worker_serves_the_class_from_a_real_workers_heartbeat(pool: Pool) -> None:
    ai_job = await _enqueue(pool, "diag.sleep", {"seconds": 1, "concurrencyClass": "ai"})
    why = await _why(pool, ai_job)
    assert why.reason is Reason.NO_WORKER and why.workers.live_any_class == 0
    assert why.workers.last_worker is None

    async with running_worker(pool, slots={"default": 1}) as worker:
        rows = await eventually(
            lambda: fetch(pool, "SELECT * FROM worker_heartbeat"), what="the worker's row"
        )
        assert [(r["worker_id"], r["classes"]) for r in rows] == [(worker.worker_id, ["default"])]
        why = await _why(pool, ai_job)
        assert why.reason is Reason.NO_WORKER and why.workers.live_any_class == 1
        assert "'ai'" in why.message
        noop = await _enqueue(pool)
        done = await eventually(
            lambda: fetch(
                pool, "SELECT 1 FROM all_jobs WHERE id = %s AND status = 'completed'", noop
            )
        )
        assert done
    # A clean stop deletes the row.
    assert await fetch(pool, "SELECT * FROM worker_heartbeat") == []

    await _live_worker(pool, "old-ai-worker", ai=1)
    await fetch(
        pool,
        "UPDATE worker_heartbeat SET heartbeat_at = clock_timestamp() - interval '5 minutes' "
        "RETURNING 1",
    )
    why = await _why(pool, ai_job)
    assert why.reason is Reason.NO_WORKER and why.workers.last_worker == "old-ai-worker"
    assert "old-ai-worker" in why.message
    await _live_worker(pool, "new-ai-worker", ai=1)
    assert (await _why(pool, ai_job)).reason is Reason.CLAIMABLE


async def test_parent_waiting_for_its_children_counts_them(pool: Pool) -> None:
    parent = uuid.uuid4()
    await fetch(
        pool,
        "INSERT INTO jobs (id, type, role, available_at) "
        "VALUES (%s, 'ccip.batch', 'parent', '9999-12-31 00:00:00+00') RETURNING 1",
        parent,
    )
    for status in ("pending", "pending", "completed", "failed"):
        await fetch(
            pool,
            "INSERT INTO jobs (id, type, parent_id, status, finished_at) VALUES "
            "(gen_random_uuid(), 'diag.noop', %s, %s, "
            "CASE WHEN %s <> 'pending' THEN clock_timestamp() END) RETURNING 1",
            parent,
            status,
            status,
        )
    why = await _why(pool, parent)
    assert why.reason is Reason.WAITING_FOR_CHILDREN and why.also == ()
    assert why.children is not None
    assert (why.children.total, why.children.active) == (4, 2)
    assert (why.children.completed, why.children.failed) == (1, 1)
    assert "2 active" in why.message

    # Cancelling the parent cancels its children: a child names its parent.
    child = (await fetch(pool, "SELECT id FROM all_jobs WHERE parent_id = %s LIMIT 1", parent))[0]
    await service(pool).cancel(parent)
    why = await _why(pool, child["id"])
    assert why.reason is Reason.CANCELLED
    assert [(b.id, b.status) for b in why.blocking_jobs] == [(parent, "cancelled")]


async def test_ended_jobs_running_jobs_and_unknown_types(pool: Pool) -> None:
    await _live_worker(pool)
    exhausted = await _enqueue(pool, max_attempts=1)
    [job] = await _claim(pool)
    async with pool.connection() as conn:
        await claims.fail(conn, job, kind=FailureKind.RETRYABLE, error="ConnectionError: reset")
    why = await _why(pool, exhausted)
    assert why.reason is Reason.ATTEMPTS_EXHAUSTED and (why.attempt_count, why.max_attempts) == (
        1,
        1,
    )
    assert "ConnectionError: reset" in why.message

    permanent = await _enqueue(pool)
    [job] = await _claim(pool)
    async with pool.connection() as conn:
        await claims.fail(conn, job, kind=FailureKind.PERMANENT, error="target gone")
    assert (await _why(pool, permanent)).reason is Reason.FAILED

    completed = await _enqueue(pool)
    [job] = await _claim(pool)
    async with pool.connection() as conn:
        await claims.settle_many(conn, [Done(job, None)])
    assert (await _why(pool, completed)).reason is Reason.COMPLETED

    cancelled = await _enqueue(pool)
    await service(pool).cancel(cancelled)
    why = await _why(pool, cancelled)
    assert why.reason is Reason.CANCELLED and why.blocking_jobs == ()

    running = await _enqueue(pool)
    [job] = await _claim(pool)
    why = await _why(pool, running)
    assert why.reason is Reason.RUNNING and why.claimed_by == LIVE and why.holder_alive is True
    assert why.lease_expires_at is not None and why.lease_expires_at > why.checked_at
    await fetch(
        pool,
        "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1 second' "
        "WHERE id = %s RETURNING 1",
        running,
    )
    assert (await _why(pool, running)).reason is Reason.LEASE_EXPIRED

    # A type no longer (or never) registered: enqueue refuses it, an older deployment left it.
    unknown = uuid.uuid4()
    await fetch(
        pool, "INSERT INTO jobs (id, type) VALUES (%s, 'retired.type') RETURNING 1", unknown
    )
    why = await _why(pool, unknown)
    assert why.reason is Reason.UNKNOWN_TYPE and "retired.type" in why.message


async def test_superseded_by_duplicate_reconciliation_names_the_survivor(pool: Pool) -> None:
    # A legacy table without the active dedupe index held two active source.sync jobs.
    async with pool.connection() as conn:
        await conn.execute("DROP INDEX jobs_active_dedupe_key")
    ids = [uuid.uuid4(), uuid.uuid4()]
    for rev, job_id in enumerate(ids, start=1):
        await fetch(
            pool,
            "INSERT INTO jobs (id, type, dedupe_key, revision, payload) VALUES "
            "(%s, 'source.sync', 's/full', %s, "
            "jsonb_build_object('sourceId', 's', 'syncKind', 'full', 'revision', %s::int)) "
            "RETURNING 1",
            job_id,
            rev,
            rev,
        )
    plan = await reconcile_duplicates(pool, registry_policies(registry()), apply=True)
    [group] = plan.groups
    [loser] = group.cancelled
    survivor = uuid.UUID(group.survivor)
    assert survivor == ids[1], "supersede keeps the highest revision"
    why = await _why(pool, uuid.UUID(loser))
    assert why.reason is Reason.SUPERSEDED and why.replaced_by == survivor
    assert [(b.id, b.status) for b in why.blocking_jobs] == [(survivor, "pending")]
    assert str(survivor) in why.message


async def test_unknown_job_is_not_found(pool: Pool) -> None:
    with pytest.raises(NotFound, match="not found"):
        await _why(pool, uuid.uuid4())


async def _holding(dsn: str, job_id: uuid.UUID, mode: str, app: str) -> psycopg.AsyncConnection:
    """Another session holding `FOR <mode>` on the job's row (idle in transaction)."""
    conn = await psycopg.AsyncConnection.connect(dsn, application_name=app)
    await conn.execute(f"SELECT 1 FROM jobs WHERE id = %s FOR {mode}", (job_id,))  # type: ignore[arg-type]
    return conn


async def test_a_row_locked_by_another_session_names_its_pid_application_and_state(
    pool: Pool, db_dsn: str
) -> None:
    """Issue 40: the session holding the row is named, one locker (the row's xmax) or
    several (a MultiXact, with their modes); the lock gone, the answer is the usual one."""
    await _live_worker(pool)
    running = await _enqueue(pool)
    [_job] = await _claim(pool)
    holder = await _holding(db_dsn, running, "KEY SHARE", "psql-report")
    try:
        why = await _why(pool, running)
        assert (why.reason, why.also) == (Reason.ROW_LOCKED, (Reason.RUNNING,)), why
        [locker] = why.row_locked_by
        assert locker.pid == holder.info.backend_pid and locker.application == "psql-report"
        assert locker.state == "idle in transaction"
        assert (
            f"row locked by pid {holder.info.backend_pid} (psql-report, idle in transaction, since"
            in why.message
        )
        second = await _holding(db_dsn, running, "KEY SHARE", "second-report")
        try:
            both = (await _why(pool, running)).row_locked_by
            assert {(x.pid, x.mode) for x in both} == {
                (holder.info.backend_pid, "keysh"),
                (second.info.backend_pid, "keysh"),
            }, both
        finally:
            await second.close()
    finally:
        await holder.close()
    why = await _why(pool, running)
    assert (why.reason, why.row_locked_by) == (Reason.RUNNING, ())

    pending = await _enqueue(pool)
    holder = await _holding(db_dsn, pending, "UPDATE", "operator")
    try:
        why = await _why(pool, pending)
        assert why.reason is Reason.ROW_LOCKED and "a claim skips the row" in why.message, why
    finally:
        await holder.close()
    assert (await _why(pool, pending)).reason is Reason.CLAIMABLE
