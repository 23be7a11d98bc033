"""A prune pass that deletes many finished jobs says so in one warning line with the count
(e.g. the first worker started against a legacy table with months of history)."""

from __future__ import annotations

import logging

import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs.maintenance import Pruner

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
    await _finished_jobs(pool, 25, "2 hours")
    await _finished_jobs(pool, 4, "1 minute")  # inside the retention: kept
    pruner = Pruner(pool=pool, interval_s=60, retention_s=3600, limit=10, log_threshold=20)
    with caplog.at_level(logging.INFO, logger="jobrelay.jobs.maintenance"):
        assert await pruner.run_once() == 25
    (record,) = caplog.records  # three batches of deletes, one line
    assert record.levelno == logging.WARNING
    assert "pruned 25 finished jobs" in record.getMessage()
    assert "JOBRELAY_JOBS_PRUNE_LOG_THRESHOLD=20" in record.getMessage()


async def test_a_pass_at_the_threshold_stays_at_info(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    await _finished_jobs(pool, 20, "2 hours")
    pruner = Pruner(pool=pool, interval_s=60, retention_s=3600, limit=10, log_threshold=20)
    with caplog.at_level(logging.INFO, logger="jobrelay.jobs.maintenance"):
        assert await pruner.run_once() == 20
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "pruned 20 finished jobs" in record.getMessage()


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="log_threshold"):
        Pruner(pool=None, interval_s=60, retention_s=3600, log_threshold=-1)  # type: ignore[arg-type]
