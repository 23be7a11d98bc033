"""Retention of finished jobs: kept per type, purged by dropping whole partitions.

A job that ends leaves `jobs` for `finished_jobs` (migration 0017), in a partition per
purge day: its finish time plus the retention of its type, read from `job_retention`. One
pass of `apply` (the worker's `Pruner`, every `prune_interval_s`):

1. writes the settings into `job_retention` (the default as type `*`, then each type);
2. creates the partitions that jobs finishing in the next days will land in;
3. moves, in batches, jobs finished in place (before the migration, or by a process of an
   earlier release) from `jobs` to `finished_jobs`;
4. drops the partitions whose purge day is over, with the attempt history of their jobs
   (no row-by-row delete, no dead rows, nothing for autovacuum to do);
5. deletes, in batches, the jobs past their day that went to the default partition (their
   day had no partition yet when they finished, or they were moved there by step 3).

DDL waits for locks at most `lock_timeout_s` and is retried at the next pass, so a long
reader holding `finished_jobs` never queues the workers' statements behind the pruner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import LiteralString

from psycopg.errors import LockNotAvailable

from jobrelay.db.pool import Connection, bound_lock_waits
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.jobs")
DEFAULT_TYPE = "*"  # the row of job_retention every type without its own uses
DAYS_AHEAD = 3  # partitions created this many days beyond today's purge days


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs are kept: `default_s` for every type (None: forever), and
    `by_type` overriding it for some types (seconds, None: forever)."""

    default_s: float | None
    by_type: Mapping[str, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, seconds in {DEFAULT_TYPE: self.default_s, **self.by_type}.items():
            if seconds is not None and not seconds > 0:
                raise ValueError(f"retention of {name!r} must be > 0 or None, got {seconds!r}")

    def rows(self) -> tuple[list[str], list[int | None]]:
        """The (types, seconds) columns of `job_retention`, the default first."""
        kept = {DEFAULT_TYPE: self.default_s, **self.by_type}
        return list(kept), [None if s is None else max(1, round(s)) for s in kept.values()]


@dataclass
class RetentionPass:
    """What one pass did."""

    partitions_created: int = 0
    partitions_dropped: int = 0
    dropped: int = 0  # jobs in the dropped partitions
    purged: int = 0  # jobs deleted from the default partition
    moved: int = 0  # jobs moved from `jobs`

    @property
    def acted(self) -> int:
        return self.dropped + self.purged + self.moved


async def apply(
    conn: Connection, retention: Retention, *, limit: int = 1000, lock_timeout_s: float = 0.2
) -> RetentionPass:
    """One retention pass (see the module docstring); each step in its own transaction."""
    done = RetentionPass()
    types, seconds = retention.rows()
    await conn.execute(_QUERIES.sync_job_retention, {"types": types, "retention_s": seconds})
    async with conn.transaction():
        await bound_lock_waits(conn, lock_timeout_s)
        cursor = await conn.execute(_QUERIES.create_finished_partitions, {"days_ahead": DAYS_AHEAD})
        done.partitions_created = sum(1 for r in await cursor.fetchall() if r["partition"])
    done.moved = await _batches(conn, _QUERIES.move_finished_jobs, limit)
    cursor = await conn.execute(_QUERIES.due_finished_partitions)
    for row in await cursor.fetchall():
        try:
            async with conn.transaction():
                await bound_lock_waits(conn, lock_timeout_s)
                dropped = await conn.execute(
                    _QUERIES.drop_finished_partition, {"name": row["name"]}
                )
                found = await dropped.fetchone()
        except LockNotAvailable:
            continue  # a reader holds it: the next pass drops it
        done.partitions_dropped += 1
        done.dropped += int(str(found["jobs"])) if found else 0
    done.purged = await _batches(conn, _QUERIES.purge_default_finished, limit)
    return done


async def move_finished(conn: Connection, *, limit: int = 1000) -> int:
    """Move every job finished in place from `jobs` to `finished_jobs`, a batch per
    transaction; returns how many moved."""
    return await _batches(conn, _QUERIES.move_finished_jobs, limit)


async def _batches(conn: Connection, query: LiteralString, limit: int) -> int:
    total = 0
    while True:
        cursor = await conn.execute(query, {"limit": limit})
        row = await cursor.fetchone()
        count = int(str(row["jobs"])) if row else 0
        total += count
        if count < limit:
            return total
