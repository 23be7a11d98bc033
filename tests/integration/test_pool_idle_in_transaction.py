"""A process frozen inside a transaction (SIGSTOP, a debugger, a stalled VM) must not hold its
row locks until it wakes: jobrelay's pools ask the server to end such a session after
JOBRELAY_DB_IDLE_IN_TRANSACTION_TIMEOUT_S (direct connections; tested here with two)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from jobrelay.db.pool import open_pool
from tests.harness import api_harness


async def test_a_session_left_idle_in_a_transaction_is_ended_and_its_locks_freed(
    db_dsn: str,
) -> None:
    pool = await open_pool(db_dsn, min_size=1, max_size=1, idle_in_transaction_timeout_s=0.5)
    try:
        async with pool.connection() as frozen:
            await frozen.execute("BEGIN")
            await frozen.execute("SELECT id FROM jobs_control FOR UPDATE")
            # From here on the holder sends nothing, like a stopped process.
            async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as other:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        async with other.transaction():
                            await other.execute("SELECT id FROM jobs_control FOR UPDATE NOWAIT")
                        break
                    except psycopg.errors.LockNotAvailable:
                        assert time.monotonic() < deadline, "the lock was never freed"
                        await asyncio.sleep(0.05)
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                await frozen.execute("SELECT 1")  # its session was ended by the server
    finally:
        await pool.close()


async def test_processes_set_the_timeout_from_settings(db_dsn: str, tmp_path: Path) -> None:
    harness = api_harness(db_dsn, tmp_path, db={"idle_in_transaction_timeout_s": 90})
    async with harness as api, api.services.pool.connection() as conn:
        row = await (await conn.execute("SHOW idle_in_transaction_session_timeout")).fetchone()
    assert row is not None and row["idle_in_transaction_session_timeout"] == "90s"
