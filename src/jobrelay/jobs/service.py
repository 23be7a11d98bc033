"""`JobsService`: what the API and the CLI use of the jobs engine (built by bootstrap)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.errors import translated_errors
from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Conflict, FieldError, InvalidInput, NotFound
from jobrelay.domain.jobs import JobStatus
from jobrelay.jobs import claims, diagnosis, ticker
from jobrelay.jobs.diagnosis import Diagnosis
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import Enqueued, Job, JobPage
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.ticker import ScheduleView
from jobrelay.jobs.worker import Worker, WorkerConfig

_QUERIES = Queries("jobrelay.jobs")
MAX_PAGE = 500


async def get_job(conn: Connection, job_id: uuid.UUID) -> Job:
    """One job; raises `NotFound`."""
    cursor = await conn.execute(_QUERIES.get_job, {"id": job_id})
    row = await cursor.fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return Job.from_row(row)


@dataclass
class JobsService:
    pool: AsyncConnectionPool[Connection]
    registry: Registry
    enqueuer: Enqueuer
    failpoints: Failpoints = NO_FAILPOINTS
    # The workers' JOBRELAY_JOBS_GLOBAL_CAPS, for diagnoses (the database does not hold them).
    global_caps: Mapping[str, int] = field(default_factory=dict)

    async def enqueue(self, request: EnqueueRequest, *, conn: Connection | None = None) -> Enqueued:
        """Enqueue one job; pass `conn` to make it part of the caller's transaction."""
        if conn is not None:
            return await self.enqueuer.enqueue(conn, request)
        async with self.pool.connection() as own:
            return await self.enqueuer.enqueue(own, request)

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, conn: Connection | None = None
    ) -> list[Enqueued]:
        if conn is not None:
            return await self.enqueuer.enqueue_many(conn, requests)
        async with self.pool.connection() as own:
            return await self.enqueuer.enqueue_many(own, requests)

    async def get(self, job_id: uuid.UUID) -> Job:
        async with self.pool.connection() as conn:
            return await get_job(conn, job_id)

    async def list_jobs(
        self,
        *,
        type: str | None = None,
        status: str | None = None,
        limit: int = 50,
        before: uuid.UUID | None = None,
    ) -> JobPage:
        """Newest first; `next_before` is the cursor of the next (older) page."""
        errors: list[FieldError] = []
        if status is not None and status not in {s.value for s in JobStatus}:
            errors.append(FieldError("status", f"unknown status {status!r}"))
        if not 1 <= limit <= MAX_PAGE:
            errors.append(FieldError("limit", f"must be between 1 and {MAX_PAGE}"))
        if errors:
            raise InvalidInput("invalid job filter", errors)
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                _QUERIES.list_jobs,
                {"type": type, "status": status, "before": before, "limit": limit + 1},
            )
            rows = await cursor.fetchall()
        jobs = [Job.from_row(row) for row in rows[:limit]]
        return JobPage(jobs=jobs, next_before=jobs[-1].id if len(rows) > limit else None)

    async def children(self, job_id: uuid.UUID, *, limit: int = 50) -> list[Job]:
        """The job's children, oldest first, at most `limit` (an unknown id has none)."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_QUERIES.list_children, {"id": job_id, "limit": limit})
            return [Job.from_row(row) for row in await cursor.fetchall()]

    async def diagnose(self, job_id: uuid.UUID) -> Diagnosis:
        """Why the job is not running (or is): `jobrelay.jobs.diagnosis`; raises `NotFound`."""
        async with self.pool.connection() as conn:
            return await diagnosis.diagnose(
                conn, job_id, registry=self.registry, global_caps=self.global_caps
            )

    async def cancel(self, job_id: uuid.UUID) -> Job:
        """Cancel a pending or running job (a running handler loses its lease), with its
        active children; a child's parent is reconciled in the same transaction.

        Cancelling a cancelled job returns it unchanged; a completed or failed one is a
        `Conflict`.
        """
        async with self.pool.connection() as conn:
            row = await claims.cancel(conn, job_id)
        if row is not None:
            return Job.from_row(row)
        job = await self.get(job_id)
        if job.status is JobStatus.CANCELLED:
            return job
        raise Conflict(
            f"job {job_id} is {job.status}; only pending or running jobs can be cancelled"
        )

    async def retry(self, job_id: uuid.UUID) -> Job:
        """Put a failed (or cancelled) job back to pending with fresh attempts."""
        with translated_errors():
            async with self.pool.connection() as conn:
                cursor = await conn.execute(_QUERIES.retry_failed_job, {"id": job_id})
                row = await cursor.fetchone()
        if row is not None:
            return Job.from_row(row)
        job = await self.get(job_id)
        raise Conflict(
            f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
        )

    async def schedules(self) -> list[ScheduleView]:
        """Every schedule: stored (with its last and next tick) or declared, by name."""
        async with self.pool.connection() as conn:
            stored = await ticker.list_schedules(conn)
        return ticker.schedule_views(stored, self.registry.schedules)

    def worker(self, config: WorkerConfig) -> Worker:
        return Worker(
            pool=self.pool, registry=self.registry, config=config, failpoints=self.failpoints
        )
