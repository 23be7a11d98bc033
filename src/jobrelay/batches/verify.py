"""Kept counts that verify themselves (issue 24): each batch's counts as the count triggers
keep them (migration 0012) against the recount from every item and child.

The triggers are exact as long as every writer follows the rule of migration 0012 (no
statement changes an item and its child together). A repair script or an operator's SQL
that breaks it leaves a drift nothing else would notice. `verify` compares both, for one
batch, in one REPEATABLE READ snapshot, and with `repair` appends one correction delta row
in the same transaction: deltas add up, so writers committing meanwhile stay counted.
`jobrelay ops verify-counts` runs it over every batch (or one); the relay's count verifier
samples a few batches every minute and repairs what it finds
(`jobrelay_batch_count_drift_total`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from jobrelay.batches.counts import COUNT_FIELDS, batch_counts, recount_batch
from jobrelay.db.pool import Connection, bound_lock_waits
from jobrelay.db.sql import Queries
from jobrelay.domain.batch_status import BatchCounts

_SQL = Queries("jobrelay.batches")
_PAGE = 200


@dataclass(frozen=True, slots=True)
class Drift:
    """A batch whose kept counts differed from its recount (`repaired`: corrected)."""

    batch_id: str
    kept: BatchCounts
    recount: BatchCounts
    repaired: bool

    def as_json(self) -> dict[str, object]:
        return {
            "batchId": self.batch_id,
            "kept": {f: getattr(self.kept, f) for f in COUNT_FIELDS},
            "recount": {f: getattr(self.recount, f) for f in COUNT_FIELDS},
            "repaired": self.repaired,
        }


async def verify(
    pool: AsyncConnectionPool[Connection],
    batch_id: str,
    batch_type: str,
    *,
    repair: bool,
    lock_timeout_s: float | None = None,
) -> Drift | None:
    """Compare one batch's kept counts with its recount in one snapshot; with `repair`,
    correct a drift in the same transaction. None when they are equal. With
    `lock_timeout_s`, a correction whose batch row is held FOR UPDATE by another transaction
    (its foreign key check waits on it) raises `psycopg.errors.LockNotAvailable` after that
    long, and nothing is written."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if lock_timeout_s is not None:
            await bound_lock_waits(conn, lock_timeout_s)
        kept = await batch_counts(conn, batch_id, batch_type)
        recount = await recount_batch(conn, batch_id, batch_type)
        if kept == recount:
            return None
        if repair:
            await conn.execute(
                _SQL.count_correction,
                {
                    "batch_id": batch_id,
                    **{f: getattr(recount, f) - getattr(kept, f) for f in COUNT_FIELDS},
                },
            )
    return Drift(batch_id=batch_id, kept=kept, recount=recount, repaired=repair)


async def batches(
    pool: AsyncConnectionPool[Connection],
    *,
    batch_id: str | None = None,
    after: str = "",
    limit: int | None = None,
) -> AsyncIterator[tuple[str, str]]:
    """(id, type) of every batch in id order after `after` (or only `batch_id`), at most
    `limit` of them."""
    left = limit
    while left is None or left > 0:
        page = _PAGE if left is None else min(_PAGE, left)
        async with pool.connection() as conn:
            rows = await (
                await conn.execute(
                    _SQL.batches_to_verify,
                    {"batch_id": batch_id, "after": after, "limit": page},
                )
            ).fetchall()
        for row in rows:
            yield str(row["id"]), str(row["type"])
        if len(rows) < page:
            return
        after = str(rows[-1]["id"])
        if left is not None:
            left -= len(rows)


async def verify_all(
    pool: AsyncConnectionPool[Connection], *, batch_id: str | None = None, repair: bool
) -> tuple[int, list[Drift]]:
    """Verify every batch (or `batch_id`); how many were checked and the drifts found."""
    checked = 0
    drifts: list[Drift] = []
    async for found_id, batch_type in batches(pool, batch_id=batch_id):
        checked += 1
        drift = await verify(pool, found_id, batch_type, repair=repair)
        if drift is not None:
            drifts.append(drift)
    return checked, drifts


@dataclass(frozen=True, slots=True)
class Sample:
    """What one `verify_sample` found: the drifts, and the batches whose correction waited
    for a lock past the bound (`deferred`: left for a later sample)."""

    drifts: list[Drift]
    deferred: int = 0


async def verify_sample(
    pool: AsyncConnectionPool[Connection], *, size: int, lock_timeout_s: float | None = None
) -> Sample:
    """Verify and repair `size` batches from a random point of the id space (wrapping to
    the start): the periodic check that finds a drift within a few rounds. A batch whose
    correction would wait longer than `lock_timeout_s` for a lock is skipped this round."""
    start = str(uuid.uuid4())
    drifts: list[Drift] = []
    deferred = 0
    seen = 0
    for after in (start, ""):
        async for found_id, batch_type in batches(pool, after=after, limit=size - seen):
            if after == "" and found_id > start:
                return Sample(drifts, deferred)
            seen += 1
            try:
                drift = await verify(
                    pool, found_id, batch_type, repair=True, lock_timeout_s=lock_timeout_s
                )
            except pg_errors.LockNotAvailable:
                deferred += 1
                continue
            if drift is not None:
                drifts.append(drift)
        if seen >= size:
            break
    return Sample(drifts, deferred)
