"""The public job-type API against a real database: `jobrelay.testing.run_job`, timeouts
declared by a type, sweeps run by every worker, children enqueued from a handler, and the
payload limit counted in UTF-8 bytes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay import (
    Complete,
    EnqueueRequest,
    InvalidInput,
    JobContext,
    JobPayload,
    JobTypes,
    Outcome,
    RetryPolicy,
)
from jobrelay.db.pool import Connection
from jobrelay.jobs.worker import Worker, WorkerConfig
from jobrelay.testing import run_job
from tests.jobs_support import build_registry, eventually, fetch, running_worker, service

Pool = AsyncConnectionPool[Connection]


class Nap(JobPayload):
    seconds: float


class Fanout(JobPayload):
    count: int


def _group() -> JobTypes:
    group = JobTypes()

    @group.job_type("test.nap", timeout_s=0.2, retry=RetryPolicy(max_attempts=2, base_s=30.0))
    async def nap(ctx: JobContext[Nap]) -> Outcome:
        await asyncio.sleep(ctx.payload.seconds)
        return Complete(result={"slept": ctx.payload.seconds})

    @group.job_type("test.fanout")
    async def fanout(ctx: JobContext[Fanout]) -> Outcome:
        async def children(conn: Connection) -> None:
            await ctx.enqueue(
                conn, [EnqueueRequest("test.nap", {"seconds": 0}) for _ in range(ctx.payload.count)]
            )

        return Complete(outputs=children)

    return group


async def test_run_job_runs_one_attempt_of_a_type_and_returns_the_stored_job(
    db_dsn: str,
) -> None:
    registry = _group().registry()
    done = await run_job(registry, db_dsn, "test.nap", {"seconds": 0.01})
    assert done.status == "completed" and done.result == {"slept": 0.01}
    timed_out = await run_job(registry, db_dsn, "test.nap", {"seconds": 5})
    assert timed_out.status == "pending" and timed_out.attempt_count == 1
    assert timed_out.last_error is not None and "timed out after 0.2 s" in timed_out.last_error
    with pytest.raises(InvalidInput) as bad:
        await run_job(registry, db_dsn, "test.nap", {"seconds": "long"})
    assert [e.path for e in bad.value.errors] == ["payload.seconds"]


async def test_a_handler_enqueues_children_in_its_completing_transaction(
    db_dsn: str, pool: Pool
) -> None:
    registry = _group().registry()
    parent = await run_job(registry, db_dsn, "test.fanout", {"count": 3})
    assert parent.status == "completed"
    rows = await fetch(pool, "SELECT type FROM all_jobs WHERE type = 'test.nap'")
    assert len(rows) == 3


async def test_every_worker_runs_the_declared_sweeps(pool: Pool) -> None:
    ran: list[uuid.UUID] = []
    group = _group()

    @group.sweep("test.mark", every_s=0.05)
    async def mark(sweep_pool: Any) -> int:
        ran.append(uuid.uuid4())
        return 1

    registry = group.registry()
    product = build_registry()
    assert [s.name for s in product.sweeps] == ["code2wf.orphans", "idempotency.purge"]
    worker = Worker(pool=pool, registry=registry, config=WorkerConfig(concurrency=1))
    await worker.start()
    try:
        await eventually(lambda: _true(len(ran) >= 2), what="the sweep twice")
    finally:
        await worker.stop()
    assert worker.sweeps[0].signals.acted >= 2


async def _true(value: bool) -> bool:
    return value


async def test_the_payload_limit_counts_utf8_bytes_not_json_escapes(pool: Pool) -> None:
    jobs = service(pool, limit=256 * 1024)
    # 60,000 characters of Japanese text: 180,000 UTF-8 bytes, 360,000 as \\uXXXX escapes.
    text = "日本語" * 20_000
    accepted = await jobs.enqueue(EnqueueRequest("diag.noop", {"text": text}))
    [stored] = await fetch(pool, "SELECT payload FROM all_jobs WHERE id = %s", accepted.id)
    assert stored["payload"]["text"] == text
    with pytest.raises(InvalidInput) as too_big:
        await jobs.enqueue(EnqueueRequest("diag.noop", {"text": text * 2}))
    assert "360" in too_big.value.errors[0].message  # 360,0xx bytes of JSON


async def test_a_job_of_a_payload_chosen_class_runs_in_that_class(pool: Pool) -> None:
    jobs = service(pool)
    e = await jobs.enqueue(EnqueueRequest("diag.sleep", {"seconds": 0, "concurrencyClass": "gpu"}))
    async with running_worker(pool, slots={"gpu": 1}):
        await eventually(lambda: _completed(pool, e.id), what="the gpu job")


async def _completed(pool: Pool, job_id: uuid.UUID) -> bool:
    [found] = await fetch(
        pool, "SELECT status, concurrency_class FROM all_jobs WHERE id = %s", job_id
    )
    return found["status"] == "completed" and found["concurrency_class"] == "gpu"
