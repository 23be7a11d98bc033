"""`jobrelay ops check` and the dedupe index: persistence of every table, the partial unique
index present and valid, and how many duplicate groups stand in its way."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.ops.control import SQL
from jobrelay.ops.duplicates import duplicate_group_count

_DB_SQL = Queries("jobrelay.db")


async def dedupe_index_state(pool: AsyncConnectionPool[Connection]) -> str:
    """`valid`, `invalid` (a failed concurrent build) or `missing`."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SQL.dedupe_index_state)).fetchone()
    if row is None:
        return "missing"
    return "valid" if row["valid"] and row["is_unique"] else "invalid"


async def create_dedupe_index(pool: AsyncConnectionPool[Connection]) -> str:
    """Create the active-dedupe index CONCURRENTLY (writes go on); returns the new state.

    A concurrent build that fails (e.g. a duplicate appeared) leaves an INVALID index, which
    is dropped again so the next attempt starts clean.
    """
    if await dedupe_index_state(pool) == "invalid":
        async with pool.connection() as conn:
            await conn.execute(SQL.drop_invalid_dedupe_index)
    async with pool.connection() as conn:  # autocommit: CONCURRENTLY refuses transactions
        try:
            await conn.execute(SQL.create_dedupe_index_concurrently)
        except Exception:
            if await dedupe_index_state(pool) == "invalid":
                await conn.execute(SQL.drop_invalid_dedupe_index)
            raise
    return await dedupe_index_state(pool)


async def check(pool: AsyncConnectionPool[Connection]) -> dict[str, Any]:
    """Every table's persistence, the dedupe index state and the duplicate group count."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(_DB_SQL.table_persistence)).fetchall()
    tables = {str(r["table_name"]): str(r["persistence"]) for r in rows}
    index = await dedupe_index_state(pool)
    duplicates = await duplicate_group_count(pool)
    return {
        "tables": tables,
        "dedupeIndex": index,
        "duplicateGroups": duplicates,
        "ok": index == "valid" and duplicates == 0 and set(tables.values()) == {"logged"},
    }
