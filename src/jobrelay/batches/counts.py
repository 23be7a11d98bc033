"""A batch's counts: kept by the count triggers (migration 0012), and the checker that
recounts them from every item and child."""

from __future__ import annotations

from typing import LiteralString

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import BatchCounts

_SQL = Queries("jobrelay.batches")

COUNT_FIELDS = ("total", "queued", "running", "completed", "failed", "cancelled")
# The recount of a batch, one statement per child table.
_RECOUNT: dict[str, LiteralString] = {
    "page_import": _SQL.batch_counts_page_import,
    "code2des": _SQL.batch_counts_code2des,
}


async def batch_counts(conn: Connection, batch_id: str, batch_type: str) -> BatchCounts:
    """The counts of one batch as kept in the transactions that change its items and
    children (migration 0012: the sum of its few delta rows). `batch_type` is unused here;
    it names the child table of `recount_batch`, the checker."""
    del batch_type
    row = await (await conn.execute(_SQL.batch_counts_kept, {"batch_id": batch_id})).fetchone()
    assert row is not None
    return BatchCounts(**{k: int(str(v)) for k, v in row.items()})


async def recount_batch(conn: Connection, batch_id: str, batch_type: str) -> BatchCounts:
    """The checker: the counts of one batch recounted from every item and child (cost grows
    with the batch); call inside a transaction (the merge-join planner settings are local to
    it). The kept counts must always equal this."""
    await conn.execute(_SQL.merge_join_only)
    row = await (await conn.execute(_RECOUNT[batch_type], {"batch_id": batch_id})).fetchone()
    assert row is not None
    return BatchCounts(**{k: int(str(v)) for k, v in row.items()})
