"""Shared set-up of the batch benchmarks: an embedded PostgreSQL (fast settings) migrated to
head, the emulator, a tenant. Not a benchmark itself."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from jobrelay.auth.tenancy import Tenancy
from jobrelay.aws.emulator import LocalEmulator
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.db.pool import Connection, open_pool

FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@dataclass
class Env:
    pool: AsyncConnectionPool[Connection]
    organization_id: int
    project_id: int
    emulator_url: str
    dsn: str = ""


@asynccontextmanager
async def environment() -> AsyncIterator[Env]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", server_options=FAST)
        dsn = server.start()
        emulator = LocalEmulator()
        url = emulator.start()
        try:
            migrate.upgrade(dsn)
            pool = await open_pool(dsn, min_size=2, max_size=20)
            tenancy = Tenancy(pool)
            org = await tenancy.create_organization("bench", actor="bench")
            project = await tenancy.create_project(int(org["id"]), "bench", actor="bench")
            try:
                yield Env(pool, int(org["id"]), int(project["id"]), url, dsn)
            finally:
                await pool.close()
        finally:
            emulator.stop()
            server.stop()


async def timed(work: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    """Wall-clock seconds of `runs` runs of `work`."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await work()
        samples.append(time.perf_counter() - start)
    return samples


def summary(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return f"median {statistics.median(ms):.1f} ms, min {ms[0]:.1f} ms, max {ms[-1]:.1f} ms"
