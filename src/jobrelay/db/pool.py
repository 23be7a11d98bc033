"""The async connection pool and the transaction helper every part uses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.errors import DatabaseUnavailable, describe_dsn

Connection = psycopg.AsyncConnection[dict[str, object]]


async def open_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, timeout_s: float = 5.0
) -> AsyncConnectionPool[Connection]:
    """Open a pool of dict-row connections; fail fast with `DatabaseUnavailable`."""
    await check_connection(dsn, timeout_s=timeout_s)
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": True},
        timeout=timeout_s * 6,
        open=False,
        name="jobrelay",
    )
    await pool.open(wait=min_size > 0, timeout=timeout_s * 2)
    return pool


async def check_connection(dsn: str, *, timeout_s: float = 5.0) -> None:
    """Connect once and run `SELECT 1`; translate any failure into `DatabaseUnavailable`."""
    try:
        conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, int(timeout_s)))
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {_first_line(exc)}. "
            "Check DATABASE_URL (unset it to use the embedded server)."
        ) from exc
    async with conn:
        await conn.execute("SELECT 1")


@asynccontextmanager
async def transaction(pool: AsyncConnectionPool[Connection]) -> AsyncIterator[Connection]:
    """Borrow a connection and run the block in one transaction (commit, or roll back)."""
    async with pool.connection() as conn, conn.transaction():
        yield conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
