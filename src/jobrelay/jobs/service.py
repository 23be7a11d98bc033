"""`JobsService`: what the API and the CLI use of the jobs engine (built by bootstrap)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

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
from jobrelay.jobs.models import Attempt, Enqueued, Job, JobFilter, JobPage
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.ticker import ScheduleView
from jobrelay.jobs.worker import Worker, WorkerConfig

_QUERIES = Queries("jobrelay.jobs")
MAX_PAGE = 500
MAX_KEY = 1000  # longest type, class, source key or dedupe key accepted as a filter
MAX_ATTEMPTS_SHOWN = 200
# How far a job's UUIDv7 time may be from its created_at (application clock vs database
# transaction time) when the created range bounds the id scan.
ID_TIME_MARGIN = dt.timedelta(hours=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MAX_MS = 2**48 - 1


def uuid7_floor(at: dt.datetime) -> uuid.UUID:
    """The smallest UUIDv7 of the millisecond of `at` (ids compare bytewise, time first)."""
    ms = int((at - _EPOCH) / dt.timedelta(milliseconds=1))
    return uuid.UUID(bytes=min(max(ms, 0), _MAX_MS).to_bytes(6, "big") + bytes(10))


def _aware(at: dt.datetime | None) -> dt.datetime | None:
    """Naive times are UTC."""
    return at if at is None or at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def check_filter(f: JobFilter, *, limit: int) -> JobFilter:
    """`f` with naive times read as UTC; raises `InvalidInput` naming every bad field."""
    errors: list[FieldError] = []
    if f.status is not None and f.status not in {s.value for s in JobStatus}:
        known = ", ".join(s.value for s in JobStatus)
        errors.append(FieldError("status", f"unknown status {f.status!r} (one of {known})"))
    for path, value in (
        ("type", f.type),
        ("class", f.concurrency_class),
        ("sourceKey", f.source_key),
        ("dedupeKey", f.dedupe_key),
    ):
        if value is not None and len(value) > MAX_KEY:
            errors.append(FieldError(path, f"at most {MAX_KEY} characters"))
    if not 1 <= limit <= MAX_PAGE:
        errors.append(FieldError("limit", f"must be between 1 and {MAX_PAGE}"))
    checked = replace(
        f,
        created_from=_aware(f.created_from),
        created_to=_aware(f.created_to),
        finished_from=_aware(f.finished_from),
        finished_to=_aware(f.finished_to),
    )
    for name, low, high in (
        ("created", checked.created_from, checked.created_to),
        ("finished", checked.finished_from, checked.finished_to),
    ):
        if low is not None and high is not None and low > high:
            errors.append(FieldError(f"{name}To", f"is before {name}From"))
    if errors:
        raise InvalidInput("invalid job filter", errors)
    return checked


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
    # How long a cancel waits for a row another transaction locks (then LockNotAvailable,
    # the API's 503 row-locked); None: PostgreSQL's own lock_timeout.
    lock_timeout_s: float | None = None

    async def enqueue(
        self, request: EnqueueRequest, *, conn: Connection | None = None, stored: bool = False
    ) -> Enqueued:
        """Enqueue one job; pass `conn` to make it part of the caller's transaction, `stored`
        to get the stored row back in `Enqueued.job` (from the same round trip)."""
        if conn is not None:
            return await self.enqueuer.enqueue(conn, request, stored=stored)
        async with self.pool.connection() as own:
            return await self.enqueuer.enqueue(own, request, stored=stored)

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
        filter: JobFilter | None = None,
    ) -> JobPage:
        """Newest first; `next_before` is the cursor of the next (older) page. `type` and
        `status` are shorthands for the same fields of `filter`."""
        f = filter or JobFilter()
        if type is not None or status is not None:
            f = replace(f, type=type or f.type, status=status or f.status)
        f = check_filter(f, limit=limit)
        params = {
            "type": f.type,
            "status": f.status,
            "class": f.concurrency_class,
            "source_key": f.source_key,
            "dedupe_key": f.dedupe_key,
            "created_from": f.created_from,
            "created_to": f.created_to,
            "finished_from": f.finished_from,
            "finished_to": f.finished_to,
            "id_floor": None
            if f.created_from is None
            else uuid7_floor(f.created_from - ID_TIME_MARGIN),
            "id_ceiling": None
            if f.created_to is None
            else uuid7_floor(f.created_to + ID_TIME_MARGIN),
            "before": before,
            "limit": limit + 1,
        }
        async with self.pool.connection() as conn:
            # Never prepared: a custom plan per call drops the filters not given.
            cursor = await conn.execute(_QUERIES.list_jobs, params, prepare=False)
            rows = await cursor.fetchall()
        jobs = [Job.from_row(row) for row in rows[:limit]]
        return JobPage(jobs=jobs, next_before=jobs[-1].id if len(rows) > limit else None)

    async def attempts(
        self, job_id: uuid.UUID, *, limit: int = MAX_ATTEMPTS_SHOWN
    ) -> list[Attempt]:
        """The job's attempts that ended without success, oldest first (an unknown id has
        none); a completed attempt is the job row itself."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_QUERIES.list_attempts, {"id": job_id, "limit": limit})
            return [Attempt.from_row(row) for row in await cursor.fetchall()]

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
            row = await claims.cancel(conn, job_id, lock_timeout_s=self.lock_timeout_s)
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
