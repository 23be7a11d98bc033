"""The transaction helper, the SQL loader and constraint translation on a real database."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.errors import translated_errors
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import Conflict

INSERT_JOB = "INSERT INTO jobs (id, type, dedupe_key) VALUES (gen_random_uuid(), 'diag.noop', %s)"


async def _count_jobs(pool: AsyncConnectionPool[Connection]) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) AS n FROM all_jobs")).fetchone()
    assert row is not None
    return int(str(row["n"]))


async def test_transaction_commits(pool: AsyncConnectionPool[Connection]) -> None:
    async with transaction(pool) as conn:
        await conn.execute(INSERT_JOB, ("a",))
    assert await _count_jobs(pool) == 1


async def test_transaction_rolls_back_everything_on_error(
    pool: AsyncConnectionPool[Connection],
) -> None:
    with pytest.raises(RuntimeError):
        async with transaction(pool) as conn:
            await conn.execute(INSERT_JOB, ("a",))
            await conn.execute(INSERT_JOB, ("b",))
            raise RuntimeError("boom")
    assert await _count_jobs(pool) == 0


async def test_active_dedupe_violation_becomes_a_domain_conflict(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with transaction(pool) as conn:
        await conn.execute(INSERT_JOB, ("same",))
    with pytest.raises(Conflict, match="dedupe key"):
        async with transaction(pool) as conn:
            with translated_errors():
                await conn.execute(INSERT_JOB, ("same",))


async def test_unknown_violations_are_not_hidden(pool: AsyncConnectionPool[Connection]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        async with transaction(pool) as conn:
            with translated_errors():
                await conn.execute(
                    "INSERT INTO jobs (id, type, status) VALUES (gen_random_uuid(), 't', 'bogus')"
                )


async def test_queries_load_the_part_sql_files(pool: AsyncConnectionPool[Connection]) -> None:
    queries = Queries("jobrelay.db")
    async with pool.connection() as conn:
        row = await (await conn.execute(queries.server_report)).fetchone()
    assert row is not None
    assert str(row["server_version"])[:2].isdigit()
    with pytest.raises(FileNotFoundError):
        _ = queries.no_such_query
