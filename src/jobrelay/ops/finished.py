"""`jobrelay ops move-finished`: move the jobs finished in place (a legacy table, or jobs an
earlier release finished during a rolling deploy) from `jobs` to `finished_jobs` now, with a
count and checksum of every finished job before and after.

The worker's pruner moves the same rows a batch per pass; this runs the batches back to back
so an operator sees the table emptied of history in one command. Each batch is one
transaction: a killed run loses nothing and the next run goes on where it stopped. The check
covers the jobs that finished before the command started, read through `all_jobs` (a moved
row reads the same as before); it is exact when no worker's pruner purges overdue jobs
meanwhile (stop the workers, or keep finished jobs forever while it runs).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs import retention
from jobrelay.ops.control import SQL
from jobrelay.ops.logged import fingerprint, store_report


async def move_finished(
    pool: AsyncConnectionPool[Connection], *, batch: int = 5000, actor: str = "ops"
) -> dict[str, Any]:
    """Move every job finished in place; the report (also stored in `ops_run`)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    started = datetime.now(UTC)
    finished = sql.SQL(SQL.finished_before)
    window = {"started": started}
    async with pool.connection() as conn:
        before = await fingerprint(conn, finished, window)
        in_place = await _in_place(conn)
        moved = await retention.move_finished(conn, limit=batch)
        after = await fingerprint(conn, finished, window)
        left = await _in_place(conn)
    unchanged = before == after
    report: dict[str, Any] = {
        "outcome": "moved" if unchanged else "changed",
        "ok": unchanged,
        "inPlaceBefore": in_place,
        "moved": moved,
        "inPlaceAfter": left,
        "finishedBefore": {"rows": before.rows, "checksum": before.checksum},
        "finishedAfter": {"rows": after.rows, "checksum": after.checksum},
        "message": "every finished job is where it was read before, unchanged"
        if unchanged
        else "the finished jobs changed while moving: a worker's pruner may have purged "
        "overdue jobs; stop the workers for an exact check",
        "startedAt": started.isoformat(),
        "finishedAt": datetime.now(UTC).isoformat(),
    }
    await store_report(pool, "move-finished", report, started, actor)
    return report


async def _in_place(conn: Connection) -> int:
    row = await (await conn.execute(SQL.finished_in_place)).fetchone()
    return int(str(row["n"])) if row else 0
