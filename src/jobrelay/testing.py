"""Helpers to test your own job types against a real (test) PostgreSQL database.

`run_job` enqueues one job exactly as the API would, runs it with a real worker of the
engine until its attempt has ended, and returns the job as stored: its status, result,
`last_error`, attempts. Handlers, fenced outputs, retries and timeouts all run for real::

    from jobrelay.testing import run_job

    async def test_greet(db_dsn):
        job = await run_job(job_types.registry(), db_dsn, "example.greet", {"name": "ada"})
        assert job.status == "completed" and job.result == {"greeting": "hello ada"}

The database must be migrated (`jobrelay migrate`, or `jobrelay.testing.migrate(dsn)`).
The worker claims only the job's concurrency class; other pending jobs of that class in the
same database may run too, so give each test a database of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from jobrelay.db import migrate as _migrate
from jobrelay.db.pool import open_pool
from jobrelay.domain.jobs import JobStatus
from jobrelay.jobs.enqueue import enqueue
from jobrelay.jobs.models import Job
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.service import get_job
from jobrelay.jobs.worker import Worker, WorkerConfig

__all__ = ["migrate", "run_job"]


def migrate(dsn: str) -> None:
    """Bring the database at `dsn` to jobrelay's newest schema."""
    _migrate.upgrade(dsn)


async def run_job(
    registry: Registry,
    dsn: str,
    type: str,
    payload: Mapping[str, Any],
    *,
    timeout_s: float = 30.0,
) -> Job:
    """Enqueue one `type` job and run it once; returns the stored job after the attempt.

    A completed or failed job is returned as it ended; a retried one is returned pending
    with `last_error` and `attempt_count == 1`. Raises `TimeoutError` when the attempt has
    not ended within `timeout_s`, and `InvalidInput` when the payload does not validate.
    """
    pool = await open_pool(dsn, min_size=1, max_size=4)
    try:
        async with pool.connection() as conn:
            enqueued = await enqueue(conn, registry, type, payload)
            job = await get_job(conn, enqueued.id)
        config = WorkerConfig(
            slots={job.concurrency_class: 1},
            poll_interval_s=0.02,
            listen=False,
            retention_s=None,
            shutdown_grace_s=timeout_s,
        )
        worker = Worker(pool=pool, registry=registry, config=config)
        await worker.start()
        try:
            deadline = time.monotonic() + timeout_s
            while not _attempt_ended(job):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job.id} ({type}) did not end within {timeout_s} s")
                await asyncio.sleep(0.02)
                async with pool.connection() as conn:
                    job = await get_job(conn, enqueued.id)
        finally:
            await worker.stop()
        return job
    finally:
        await pool.close()


def _attempt_ended(job: Job) -> bool:
    if job.status is JobStatus.IN_PROGRESS:
        return False
    return job.status is not JobStatus.PENDING or job.attempt_count >= 1
