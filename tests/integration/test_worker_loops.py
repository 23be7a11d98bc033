"""The in-process worker's loops on real PostgreSQL: LISTEN/NOTIFY wake-up with a polling
fallback, metrics, an unexpected handler exception, a job claimed again while its retried
run is still ending, pause, the pruner, batched heartbeats."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import httpx
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.errors import Paused
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.maintenance import Pruner
from jobrelay.jobs.retention import Retention
from jobrelay.jobs.worker import WorkerConfig
from jobrelay.ops.control import set_pause
from tests.jobs_support import eventually, fetch, row, running_worker, service

Pool = AsyncConnectionPool[Connection]
_NEVER_POLL = 3600.0  # a worker that only wakes on notifications


async def _status(pool: Pool, job_id: uuid.UUID, status: str) -> bool:
    return bool((await row(pool, job_id))["status"] == status)


async def _true(value: bool) -> bool:
    return value


async def test_an_enqueue_wakes_an_idle_worker_through_notify(pool: Pool) -> None:
    jobs = service(pool)
    async with running_worker(pool, poll_interval_s=_NEVER_POLL) as worker:
        await eventually(lambda: _true(worker.listener.connected), what="LISTEN")
        await eventually(lambda: _true(worker.stats.claimed == 0 and worker.claim_idle))
        e = await jobs.enqueue(EnqueueRequest("diag.noop", {}))
        # Without the notification the worker would sleep for an hour.
        await eventually(lambda: _status(pool, e.id, "completed"), timeout_s=10)
    assert worker.listener.signals.acted >= 1


async def test_an_idle_queue_costs_one_claim_per_job(pool: Pool) -> None:
    # After a claim that came back short, a job's end is no reason to claim again: only a
    # notification is (the poll never fires here).
    jobs = service(pool)
    async with running_worker(pool, poll_interval_s=_NEVER_POLL) as worker:
        await eventually(lambda: _true(worker.listener.connected), what="LISTEN")
        await eventually(lambda: _true(worker.claim_idle))
        before = worker.stats.claims
        for n in range(10):
            e = await jobs.enqueue(EnqueueRequest("diag.noop", {"n": n}))
            await eventually(lambda: _status(pool, e.id, "completed"), timeout_s=10)  # noqa: B023
            await eventually(lambda: _true(worker.claim_idle))
        claims = worker.stats.claims - before
    assert 10 <= claims <= 12, f"{claims} claims for 10 jobs"


async def test_the_worker_falls_back_to_polling_and_reconnects_its_listener(pool: Pool) -> None:
    jobs = service(pool)
    async with running_worker(pool, poll_interval_s=0.05) as worker:
        await eventually(lambda: _true(worker.listener.connected), what="LISTEN")
        pid = worker.listener.backend_pid
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        e = await jobs.enqueue(EnqueueRequest("diag.noop", {}))
        await eventually(lambda: _status(pool, e.id, "completed"), what="polling fallback")
        await eventually(
            lambda: _true(worker.listener.connected and worker.listener.backend_pid != pid),
            what="the listener to reconnect",
        )
    assert worker.listener.signals.errors >= 1


async def test_metrics_are_served_on_the_configured_port(pool: Pool) -> None:
    jobs = service(pool)
    await jobs.enqueue_many(
        [EnqueueRequest("diag.noop", {}), EnqueueRequest("diag.fail", {"kind": "permanent"})]
    )
    async with running_worker(pool, metrics_port=0) as worker:
        await eventually(lambda: _true(worker.stats.completed == 1 and worker.stats.failed == 1))
        assert worker.metrics_port
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{worker.metrics_port}/metrics")).text
    assert 'jobrelay_jobs_claimed_total{type="diag.noop"} 1.0' in text
    assert 'jobrelay_jobs_completed_total{type="diag.noop"} 1.0' in text
    assert 'jobrelay_jobs_failed_total{type="diag.fail"} 1.0' in text
    assert "jobrelay_jobs_running{class=" in text
    assert "jobrelay_claim_latency_seconds_count" in text
    assert 'jobrelay_handler_duration_seconds_count{type="diag.noop"} 1.0' in text
    assert "jobrelay_jobs_lease_lost_total 0.0" in text


async def test_an_unexpected_exception_is_a_recorded_retry_and_the_worker_goes_on(
    pool: Pool,
) -> None:
    jobs = service(pool)
    crash = await jobs.enqueue(EnqueueRequest("diag.fail", {"kind": "exception", "times": 1}))
    async with running_worker(pool, jitter=lambda: 0.0) as worker:
        done = await eventually(lambda: _done(pool, crash.id), what="the retried job to complete")
        after = await jobs.enqueue(EnqueueRequest("diag.noop", {}))
        await eventually(lambda: _status(pool, after.id, "completed"))
    assert done["attempt_count"] == 2 and done["failure_kind"] is None
    assert "RuntimeError: unexpected: diag.fail attempt 1" in done["last_error"]
    assert worker.stats.retried == 1 and worker.stats.errors == 0


class _SlowReturnPool(AsyncConnectionPool[Connection]):
    """A pool whose connection returns wait for `before_return` while it is set: it holds a
    run that just wrote its outcome before the run's task can end."""

    before_return: Callable[[Connection], Awaitable[None]] | None = None

    async def putconn(self, conn: Connection) -> None:
        if self.before_return is not None:
            await self.before_return(conn)
        await super().putconn(conn)


async def test_a_job_reclaimed_while_its_retried_run_is_still_ending_runs_its_new_claim(
    db_dsn: str,
) -> None:
    # The retry (no delay) commits; before the run that wrote it has returned its
    # connection, this worker's claim loop takes the job again. The new claim must run with
    # its own token and attempt, not as the old run.
    pool = _SlowReturnPool(
        db_dsn, kwargs={"row_factory": dict_row, "autocommit": True}, min_size=2, open=False
    )
    await pool.open(wait=True)
    try:
        jobs = service(pool)
        job = await jobs.enqueue(EnqueueRequest("diag.fail", {"kind": "retryable", "times": 1}))
        held: list[int] = []

        async def hold_until_reclaimed(conn: Connection) -> None:
            # Only the run's own return right after its retry (the job's tasks are named
            # after it) waits; the job may already be claimed again by then.
            task = asyncio.current_task()
            if held or task is None or task.get_name() != f"job:diag.fail:{job.id}":
                return
            # last_error, not failure_kind: on a busy machine the new claim may already have
            # completed (clearing failure_kind) before this return runs; the error stays.
            found = await (
                await conn.execute("SELECT last_error FROM all_jobs WHERE id = %s", (job.id,))
            ).fetchone()
            if found is None or found["last_error"] is None:
                return
            held.append(1)
            await eventually(
                lambda: _reclaimed(conn, job.id), timeout_s=10, what="the job claimed again"
            )

        pool.before_return = hold_until_reclaimed
        async with running_worker(pool, jitter=lambda: 0.0) as worker:
            done = await eventually(lambda: _done(pool, job.id), what="the second attempt")
    finally:
        await pool.close()
    assert held, "the retry's connection return was never held"
    assert done["attempt_count"] == 2
    assert worker.stats.retried == 1 and worker.stats.lease_lost == 0
    assert worker.stats.completed == 1


async def _reclaimed(conn: Connection, job_id: uuid.UUID) -> bool:
    found = await (
        await conn.execute("SELECT attempt_count FROM all_jobs WHERE id = %s", (job_id,))
    ).fetchone()
    return found is not None and found["attempt_count"] == 2


async def _done(pool: Pool, job_id: uuid.UUID) -> dict | None:  # type: ignore[type-arg]
    found = await row(pool, job_id)
    return found if found["status"] == "completed" else None


async def test_paused_claims_run_nothing_and_paused_enqueue_is_refused(pool: Pool) -> None:
    jobs = service(pool)
    await set_pause(pool, claims=True, enqueue=False, reason="quiesce", actor="test")
    e = await jobs.enqueue(EnqueueRequest("diag.noop", {}))
    async with running_worker(pool) as worker:
        runs = worker.rescuer.signals.runs
        await eventually(lambda: _true(worker.rescuer.signals.runs >= runs + 2))
        assert (await row(pool, e.id))["status"] == "pending"
        await set_pause(pool, claims=False, enqueue=True, reason="quiesce", actor="test")
        await eventually(lambda: _status(pool, e.id, "completed"))
        try:
            await jobs.enqueue(EnqueueRequest("diag.noop", {}))
        except Paused as exc:
            assert "paused" in str(exc)
        else:
            raise AssertionError("enqueue must be refused while paused")


async def test_the_pruner_moves_jobs_finished_in_place_and_purges_the_overdue(
    pool: Pool,
) -> None:
    """Jobs an earlier release finished in `jobs` move to `finished_jobs`; those past their
    purge day (finish day plus the retention) go in the same pass, the others stay."""
    jobs = service(pool)
    old, recent, active = [
        e.id
        for e in await jobs.enqueue_many([EnqueueRequest("diag.noop", {"n": n}) for n in range(3)])
    ]
    child = uuid.uuid4()
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE jobs SET status = 'completed', finished_at = now() - %s::interval "
            "WHERE id = ANY(%s)",
            ("3 days", [old]),
        )
        await conn.execute(
            "UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = %s", (recent,)
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, parent_id, status, finished_at) "
            "VALUES (%s, 'diag.noop', %s, 'completed', now() - interval '4 days')",
            (child, old),
        )
    pruner = Pruner(pool=pool, interval_s=60, retention=Retention(default_s=3600.0), limit=1)
    assert await pruner.run_once() == 5, pruner.last
    assert pruner.last is not None
    assert (pruner.last.moved, pruner.last.purged) == (3, 2)
    left = {r["id"]: r["status"] for r in await fetch(pool, "SELECT id, status FROM all_jobs")}
    assert left == {recent: "failed", active: "pending"}
    [moved] = await fetch(pool, "SELECT id FROM finished_jobs")
    assert moved["id"] == recent
    assert await pruner.run_once() == 0, "a second pass has nothing to do"


def test_loops_and_config_refuse_bad_values() -> None:
    for bad in ({"slots": {"GPU": 1}}, {"global_caps": {"ai": 0}}, {"lease_s": 0}):
        try:
            WorkerConfig(**bad)  # type: ignore[arg-type]
        except ValueError as exc:
            assert str(next(iter(bad))) in str(exc)
        else:
            raise AssertionError(f"{bad} accepted")


async def test_one_batched_heartbeat_keeps_many_jobs_alive(pool: Pool) -> None:
    jobs = service(pool)
    ids = [
        e.id for e in await jobs.enqueue_many([EnqueueRequest("diag.sleep", {"seconds": 1.0})] * 4)
    ]
    async with running_worker(pool, lease_s=0.3, rescue_interval_s=0.05) as worker:
        for job_id in ids:
            await eventually(lambda job_id=job_id: _done(pool, job_id))
    assert worker.rescuer.signals.acted == 0
    assert worker.keeper.signals.runs >= 3 and worker.keeper.signals.acted == 0
    for job_id in ids:
        assert (await row(pool, job_id))["attempt_count"] == 1
