"""Helpers for the jobs engine suites: the real registry and service on a test pool, an
in-process worker, and direct row reads. Waiting is polling with a deadline, never sleep."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.models import Enqueued
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.types import build_registry
from jobrelay.jobs.worker import Worker, WorkerConfig

T = TypeVar("T")


def registry() -> Registry:
    return build_registry(diag_enabled=True)


def service(pool: AsyncConnectionPool[Connection], *, limit: int = 256 * 1024) -> JobsService:
    reg = registry()
    return JobsService(pool=pool, registry=reg, enqueuer=Enqueuer(reg, payload_limit_bytes=limit))


async def enqueue(
    pool: AsyncConnectionPool[Connection], type_: str, payload: dict[str, Any], **kw: Any
) -> Enqueued:
    return await service(pool).enqueue(EnqueueRequest(type=type_, payload=payload, **kw))


async def row(pool: AsyncConnectionPool[Connection], job_id: uuid.UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,))
        found = await cur.fetchone()
    assert found is not None, f"job {job_id} not found"
    return dict(found)


async def fetch(
    pool: AsyncConnectionPool[Connection], sql: str, *args: Any
) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, args or None)  # type: ignore[arg-type]
        return [dict(r) for r in await cur.fetchall()]


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 20.0, what: str = "condition"
) -> T:
    """Poll an async probe until it returns a truthy value (the async `wait_until`)."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


@asynccontextmanager
async def running_worker(
    pool: AsyncConnectionPool[Connection],
    *,
    jitter: Callable[[], float] | None = None,
    **config: Any,
) -> AsyncIterator[Worker]:
    defaults: dict[str, Any] = {"concurrency": 4, "poll_interval_s": 0.01, "lease_s": 10.0}
    extra: dict[str, Any] = {} if jitter is None else {"jitter": jitter}
    worker = Worker(
        pool=pool, registry=registry(), config=WorkerConfig(**{**defaults, **config}), **extra
    )
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()
