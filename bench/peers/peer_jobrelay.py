"""Adapter: jobrelay for ../shared/bench-peers (see bench/README.md for how to run it).

Enqueue goes through the real `Enqueuer` (registry validation, atomic ON CONFLICT statement);
the worker is the real `jobrelay.jobs.worker.Worker` with its production defaults (batched
claims, batched CAS completions and heartbeats, LISTEN/NOTIFY wake-up, lease rescue);
`concurrency` slots shared by every class. `JOBRELAY_WORKER_PREFETCH` (default 0) sets
the claim-ahead. The harness's job body runs as the handler
of `diag.noop`. Completion time is `finished_at`, the `clock_timestamp()` of the batched
completion statement, so `acked_*` reflects durable completion.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from importlib.metadata import version as _v
from typing import Any

from jobrelay.bootstrap import product_job_types
from jobrelay.db import migrate
from jobrelay.db.pool import open_pool
from jobrelay.domain.jobs import Complete
from jobrelay.jobs.enqueue import Enqueuer, EnqueueRequest
from jobrelay.jobs.registry import JobContext, Registry
from jobrelay.jobs.worker import Worker, WorkerConfig

_HANDLER: Any = None
_DONE = Complete()


async def bench_noop(ctx: JobContext[Any]) -> Complete:
    await _HANDLER(dict(ctx.job.payload), str(ctx.job.id))
    return _DONE


def _registry() -> Registry:
    base = product_job_types(diag_enabled=True).registry()
    return Registry(
        [
            dataclasses.replace(entry, handler=bench_noop) if entry.name == "diag.noop" else entry
            for entry in base
        ],
        classes=base.classes,
    )


class Adapter:
    name = "jobrelay"
    supports_bulk = True
    COMPLETED_SQL = (
        "SELECT (payload->>'i')::int, extract(epoch FROM finished_at) "
        "FROM all_jobs WHERE status = 'completed'"
    )

    @staticmethod
    def version() -> str:
        return _v("jobrelay")

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def install(self) -> None:
        await asyncio.to_thread(migrate.upgrade, self.dsn)

    async def open(self) -> None:
        self.pool = await open_pool(self.dsn, min_size=1, max_size=2)
        self.enqueuer = Enqueuer(
            product_job_types(diag_enabled=True).registry(), payload_limit_bytes=262144
        )

    async def close(self) -> None:
        await self.pool.close()

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        async with self.pool.connection() as conn:
            await self.enqueuer.enqueue(conn, EnqueueRequest("diag.noop", payload))

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        async with self.pool.connection() as conn:
            await self.enqueuer.enqueue_many(
                conn, [EnqueueRequest("diag.noop", p) for p in payloads]
            )

    async def run_worker(self, concurrency: int, handler: Any, stop: asyncio.Event) -> None:
        global _HANDLER
        _HANDLER = handler
        pool = await open_pool(self.dsn, min_size=2, max_size=concurrency + 4)
        try:
            worker = Worker(
                pool=pool,
                registry=_registry(),
                config=WorkerConfig(
                    concurrency=concurrency,
                    prefetch=int(os.environ.get("JOBRELAY_WORKER_PREFETCH", "0")),
                ),
            )
            await worker.run_until(stop)
        finally:
            await pool.close()
