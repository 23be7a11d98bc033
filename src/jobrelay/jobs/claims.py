"""Claim and the fenced writes of a claimed job (DESIGN.md section 3, invariants 4-7).

Every function takes a connection and runs one statement from `queries/`. Every write of a
claimed job is a compare-and-set on id + status + claim token (completion also on the
revision seen at claim time); a write that matches no row raises `LeaseLost`. Time is
always the database's `clock_timestamp()`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import FailureKind, LeaseLost, OutputWriter
from jobrelay.jobs.models import ClaimedJob

_QUERIES = Queries("jobrelay.jobs")
ALL_CLASSES = ("ai", "default")


async def claim(
    conn: Connection,
    *,
    worker_id: str,
    limit: int,
    lease_s: float,
    classes: Sequence[str] = ALL_CLASSES,
) -> list[ClaimedJob]:
    """Claim up to `limit` available jobs in one statement (fresh token, attempt + 1)."""
    if limit <= 0:
        return []
    cursor = await conn.execute(
        _QUERIES.claim_jobs,
        {"worker_id": worker_id, "limit": limit, "lease_s": lease_s, "classes": list(classes)},
    )
    return [ClaimedJob.from_row(row) for row in await cursor.fetchall()]


async def heartbeat(conn: Connection, job: ClaimedJob, *, lease_s: float) -> int:
    """Extend the lease; returns the job's current revision. Raises `LeaseLost`."""
    cursor = await conn.execute(
        _QUERIES.heartbeat_job,
        {"id": job.id, "claim_token": job.claim_token, "lease_s": lease_s},
    )
    row = await cursor.fetchone()
    if row is None:
        raise LeaseLost(job.id, "heartbeat")
    return cast(int, row["revision"])


class Completion(StrEnum):
    COMPLETED = "completed"
    REQUEUED = "requeued"  # the revision changed while it ran: back to pending
    LOST = "lost"  # the claim no longer holds the job: nothing written


@dataclass(frozen=True, slots=True)
class Done:
    """A finished job waiting to be recorded, with its JSON result (or None)."""

    job: ClaimedJob
    result: Mapping[str, Any] | None = None


async def complete_many(conn: Connection, done: Sequence[Done]) -> dict[uuid.UUID, Completion]:
    """Complete many claimed jobs with one statement (plus one for changed revisions)."""
    if not done:
        return {}
    cursor = await conn.execute(
        _QUERIES.complete_jobs,
        {
            "ids": [d.job.id for d in done],
            "claim_tokens": [d.job.claim_token for d in done],
            "revisions": [d.job.revision for d in done],
            "results": [None if d.result is None else json.dumps(d.result) for d in done],
        },
    )
    completed = {cast(uuid.UUID, row["id"]) for row in await cursor.fetchall()}
    outcome = dict.fromkeys(completed, Completion.COMPLETED)
    rest = [d.job for d in done if d.job.id not in completed]
    if rest:
        requeued = await _requeue(conn, rest)
        for job in rest:
            outcome[job.id] = Completion.REQUEUED if job.id in requeued else Completion.LOST
    return outcome


async def _requeue(conn: Connection, jobs: Sequence[ClaimedJob]) -> set[uuid.UUID]:
    cursor = await conn.execute(
        _QUERIES.requeue_jobs,
        {"ids": [j.id for j in jobs], "claim_tokens": [j.claim_token for j in jobs]},
    )
    return {cast(uuid.UUID, row["id"]) for row in await cursor.fetchall()}


async def complete_fenced(
    pool: AsyncConnectionPool[Connection],
    job: ClaimedJob,
    *,
    result: Mapping[str, Any] | None,
    outputs: OutputWriter | None,
) -> Completion:
    """Complete one job and write its business outputs in ONE transaction.

    The completion re-checks claim token and revision first (and locks the row); outputs
    are written only when it matched, so a stale worker never writes. When the revision
    changed the job goes back to pending and the outputs are dropped. Raises `LeaseLost`
    when the claim no longer holds the job; an error in `outputs` rolls everything back.
    """
    async with pool.connection() as conn, conn.transaction():
        status = (await complete_many(conn, [Done(job, result)]))[job.id]
        if status is Completion.LOST:
            raise LeaseLost(job.id, "complete")
        if status is Completion.COMPLETED and outputs is not None:
            await outputs(conn)
        return status


async def retry_later(conn: Connection, job: ClaimedJob, *, delay_s: float, error: str) -> None:
    """Back to pending after `delay_s` (database time). Raises `LeaseLost`."""
    cursor = await conn.execute(
        _QUERIES.retry_job,
        {"id": job.id, "claim_token": job.claim_token, "delay_s": delay_s, "error": error},
    )
    if await cursor.fetchone() is None:
        raise LeaseLost(job.id, "retry")


async def fail(conn: Connection, job: ClaimedJob, *, kind: FailureKind, error: str) -> None:
    """End the job `failed` with `kind`. Raises `LeaseLost`."""
    cursor = await conn.execute(
        _QUERIES.fail_job,
        {
            "id": job.id,
            "claim_token": job.claim_token,
            "failure_kind": str(kind),
            "error": error[:4000],
        },
    )
    if await cursor.fetchone() is None:
        raise LeaseLost(job.id, "fail")


async def release(conn: Connection, job: ClaimedJob) -> None:
    """Give the job back (pending now, attempt undone). Raises `LeaseLost`."""
    cursor = await conn.execute(
        _QUERIES.release_job, {"id": job.id, "claim_token": job.claim_token}
    )
    if await cursor.fetchone() is None:
        raise LeaseLost(job.id, "release")


async def rescue_expired(conn: Connection, *, limit: int = 1000) -> dict[uuid.UUID, str]:
    """Expired leases: back to pending with attempts left, else `failed` / lease_expired.

    Returns the new status of every rescued job.
    """
    cursor = await conn.execute(_QUERIES.rescue_expired_jobs, {"limit": limit})
    return {cast(uuid.UUID, row["id"]): str(row["status"]) for row in await cursor.fetchall()}
