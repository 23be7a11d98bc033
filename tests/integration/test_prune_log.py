"""A retention pass that moves or purges many finished jobs says so in one warning line with
the counts (e.g. the first worker started against a legacy table with months of history)."""

from __future__ import annotations

import logging

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs.maintenance import Pruner
from jobrelay.jobs.retention import Retention

Pool = AsyncConnectionPool[Connection]


async def _finished_jobs(pool: Pool, count: int, age: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO jobs (id, type, status, finished_at) "
            "SELECT fresh.id, 'diag.noop', 'completed', now() - %s::interval "
            "FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, %s)) AS fresh",
            (age, count),
        )


async def test_a_big_pass_is_one_warning_with_the_count(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    await _finished_jobs(pool, 25, "3 days")
    await _finished_jobs(pool, 4, "1 minute")  # inside the retention: kept
    pruner = Pruner(
        pool=pool, interval_s=60, retention=Retention(default_s=3600.0), limit=10, log_threshold=20
    )
    with caplog.at_level(logging.INFO, logger="jobrelay.jobs.maintenance"):
        assert await pruner.run_once() == 54  # 29 moved, 25 of them purged
    (record,) = caplog.records  # batches of moves and deletes, one line
    assert record.levelno == logging.WARNING
    assert "25 purged" in record.getMessage() and "29 moved" in record.getMessage()
    assert "JOBRELAY_JOBS_PRUNE_LOG_THRESHOLD=20" in record.getMessage()


async def test_a_pass_at_the_threshold_stays_at_info(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    await _finished_jobs(pool, 10, "3 days")
    pruner = Pruner(
        pool=pool, interval_s=60, retention=Retention(default_s=3600.0), limit=10, log_threshold=20
    )
    with caplog.at_level(logging.INFO, logger="jobrelay.jobs.maintenance"):
        assert await pruner.run_once() == 20  # 10 moved, then purged
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "10 purged" in record.getMessage() and "10 moved" in record.getMessage()


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="log_threshold"):
        Pruner(pool=None, interval_s=60, retention=Retention(default_s=3600.0), log_threshold=-1)  # type: ignore[arg-type]
