"""Worker presence: each jobs worker keeps one `worker_heartbeat` row (its id, the classes
it serves with their slots, its global caps, the job types it has handlers for) fresh while
it runs, and deletes it on a clean stop. A worker killed without stopping leaves a row that
goes stale; rows stale for `KEEP_STALE_S` are deleted by the next live worker's
announcement.

The diagnosis (`jobrelay.jobs.diagnosis`) reads these rows to tell whether any live worker
serves a job's concurrency class and type. Time is the database's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from psycopg.types.json import Jsonb

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries

_QUERIES = Queries("jobrelay.jobs")
KEEP_STALE_S = 24 * 3600.0  # a dead worker's row is named by diagnoses for a day


async def announce(
    conn: Connection,
    *,
    worker_id: str,
    class_slots: Mapping[str, int],
    global_caps: Mapping[str, int],
    interval_s: float,
    job_types: Collection[str] | None = None,
) -> None:
    """Upsert this worker's heartbeat row (fresh `heartbeat_at`), then delete rows of
    workers stale for more than `KEEP_STALE_S`. `job_types` None: every type."""
    classes: Sequence[str] = sorted(c for c, n in class_slots.items() if n > 0)
    await conn.execute(
        _QUERIES.announce_worker,
        {
            "worker_id": worker_id,
            "classes": list(classes),
            "class_slots": Jsonb(dict(class_slots)),
            "global_caps": Jsonb(dict(global_caps)),
            "interval_s": interval_s,
            "job_types": None if job_types is None else sorted(job_types),
        },
    )
    await conn.execute(_QUERIES.prune_worker_heartbeats, {"keep_s": KEEP_STALE_S})


async def forget(conn: Connection, *, worker_id: str) -> None:
    """Delete this worker's heartbeat row (a clean stop)."""
    await conn.execute(_QUERIES.forget_worker, {"worker_id": worker_id})
