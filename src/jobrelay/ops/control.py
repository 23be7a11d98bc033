"""The pause flags (quiesce): workers stop claiming, enqueue is refused while paused."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries

SQL = Queries("jobrelay.ops")


async def set_pause(
    pool: AsyncConnectionPool[Connection],
    *,
    claims: bool,
    enqueue: bool,
    reason: str | None,
    actor: str,
) -> dict[str, Any]:
    """Set both flags at once; returns the new control row."""
    async with transaction(pool) as conn:
        cur = await conn.execute(
            SQL.set_pause,
            {"claims": claims, "enqueue": enqueue, "reason": reason, "actor": actor},
        )
        row = await cur.fetchone()
    assert row is not None, "jobs_control has its singleton row from the first migration"
    return dict(row)


async def control_status(pool: AsyncConnectionPool[Connection]) -> dict[str, Any]:
    """Pause flags, live and expired leases, and pending jobs per type."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SQL.control_status)).fetchone()
    assert row is not None
    return dict(row)
