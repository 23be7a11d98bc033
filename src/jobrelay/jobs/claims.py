"""Claim and the fenced writes of a claimed job (docs/explanation/design.md, the jobs engine).

Every function takes a connection and runs statements from `queries/`. Every write of a
claimed job is a compare-and-set on id + status + claim token (completion also on the
revision seen at claim time); a write that matches no row raises `LeaseLost`. Time is
always the database's `clock_timestamp()`.

No write of a claimed job waits for another transaction's lock: rows and parents are taken
with SKIP LOCKED, and a job whose claim still matches but whose row is locked comes back
`Completion.DEFERRED` (batched writes) or raises `RowLocked` (single writes); nothing of
it was written and the caller tries again. Transactions opened here may also bound every
other lock wait with `lock_timeout_s` (PostgreSQL's `lock_timeout`, local to the
transaction, so it holds through a transaction pooler).

Parents (invariant 12): a terminal write of a child (complete, fail, lease expiry, cancel)
runs in one transaction that first locks the parent row (`lock_parents`), then writes the
child, then reconciles the parent (`reconcile_parents`) with a snapshot taken after the
lock: of two children finishing at once, the second always sees the first, and the parent
ends exactly once.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, bound_lock_waits
from jobrelay.db.sql import Queries
from jobrelay.domain.jobs import FailureKind, LeaseLost, OutputWriter, RowLocked
from jobrelay.domain.jobs_config import QueueLimits, Rate
from jobrelay.domain.storable import storable_text
from jobrelay.jobs import traces
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.workflows import release as steps_release

_QUERIES = Queries("jobrelay.jobs")
# Characters of an error message kept on the job and its attempt.
ERROR_MAX_CHARS = 4000
# The unique indexes a claim may hit when another claimer won a race (see claim_jobs.sql).
CLAIM_RACE_CONSTRAINTS = frozenset({"jobs_running_source_key", "jobs_running_class_slot"})


def _transaction(conn: Connection, *, needed: bool = True) -> AbstractAsyncContextManager[Any]:
    """A transaction when `needed` and none is open; inside the caller's transaction the
    statements simply join it (no savepoint round trips on the hot path)."""
    if needed and conn.info.transaction_status == TransactionStatus.IDLE:
        return conn.transaction()
    return contextlib.nullcontext()


@contextlib.asynccontextmanager
async def bounded_transaction(
    conn: Connection, *, needed: bool = True, lock_timeout_s: float | None = None
) -> AsyncIterator[None]:
    """`_transaction`, whose lock waits end after `lock_timeout_s` with
    `psycopg.errors.LockNotAvailable` (None: PostgreSQL's own setting). Inside the caller's
    transaction the caller's bound applies."""
    opened = needed and conn.info.transaction_status == TransactionStatus.IDLE
    async with _transaction(conn, needed=needed):
        if opened and lock_timeout_s is not None:
            await bound_lock_waits(conn, lock_timeout_s)
        yield


def is_claim_race(exc: BaseException) -> bool:
    """True for the unique violation of a claim that lost a serialization or slot race."""
    return (
        isinstance(exc, psycopg.errors.UniqueViolation)
        and exc.diag.constraint_name in CLAIM_RACE_CONSTRAINTS
    )


async def configure_claim_session(conn: Connection) -> None:
    """Prepare a connection that runs only claims (see `queries/claim_session.sql`): its
    commits do not wait for the WAL flush, and the claim statement keeps one generic plan.

    Never settle jobs or write outputs on such a connection: those commits must be durable.
    """
    await conn.execute(_QUERIES.claim_session)


async def claim(
    conn: Connection,
    limits: QueueLimits,
    *,
    worker_id: str,
    wanted: Mapping[str, int] | None = None,
    total: int | None = None,
    floors: Mapping[str, datetime] | None = None,
) -> list[ClaimedJob]:
    """Claim available jobs within `limits` in one statement (fresh token, attempt + 1).

    `wanted` and `total` are what may be taken now, per class and in all (a worker's free
    slots and prefetch; default: `limits.slots` and `limits.total`). Classes with a global
    cap take the class's advisory lock first, held until commit (in a transaction of its
    own unless one is open). Classes with a rate lock their row of `job_rate_windows`
    first, take at most what the window allows and record their starts, in the same
    transaction. `limits.fair` chooses the rotation across fairness keys (`claim_jobs.sql`).
    Without slots, every class that has pending jobs is claimed from. `floors` are the
    claimer's claim floors per class (`jobs.floors`; a class without one reads from the
    start of the pending indexes).
    """
    started_ns = time.time_ns()  # the claim spans' start (`jobs.traces`)
    total = limits.total if total is None else total
    if wanted is not None:
        per_class = dict(wanted)
    elif limits.slots is not None:
        per_class = dict(limits.slots)
    else:
        cursor = await conn.execute(_QUERIES.pending_classes)
        per_class = {str(row["concurrency_class"]): total for row in await cursor.fetchall()}
    per_class = {c: n for c, n in per_class.items() if n > 0}
    if total <= 0 or not per_class:
        return []
    caps = limits.caps
    rates = limits.rates
    capped = [c for c in sorted(per_class) if c in caps]
    rated = [c for c in sorted(per_class) if c in rates]
    async with _transaction(conn, needed=bool(capped or rated)):
        if capped:
            await conn.execute(_QUERIES.claim_lock_classes, {"classes": capped})
        if rated:
            for cls, allowed in (await rate_budget(conn, {c: rates[c] for c in rated})).items():
                per_class[cls] = min(per_class[cls], allowed)
            per_class = {c: n for c, n in per_class.items() if n > 0}
            if not per_class:
                return []
        names = sorted(per_class)
        cursor = await conn.execute(
            _QUERIES.claim_jobs,
            {
                "worker_id": worker_id,
                "total": total,
                "lease_s": limits.lease_s,
                "classes": names,
                "limits": [per_class[c] for c in names],
                "caps": [caps.get(c) for c in names],
                "fair": limits.fair,
                "types": None if limits.types is None else sorted(limits.types),
                "floors": [(floors or {}).get(c) for c in names],
            },
        )
        rows = await cursor.fetchall()
        started = [r for r in rows if r["concurrency_class"] in rates]
        if started:
            await conn.execute(
                _QUERIES.claim_rate_record,
                {
                    "classes": [r["concurrency_class"] for r in started],
                    "starts": [r["claimed_at"] for r in started],
                },
            )
    claimed = [ClaimedJob.from_row(row) for row in rows]
    traces.record_claims(claimed, started_ns, worker_id)
    return claimed


async def rate_budget(conn: Connection, rates: Mapping[str, Rate]) -> dict[str, int]:
    """Lock the rate windows of `rates`' classes until commit and return how many jobs of
    each may start now (`queries/claim_rate_budget.sql`); needs a transaction."""
    names = sorted(rates)
    cursor = await conn.execute(
        _QUERIES.claim_rate_budget,
        {
            "classes": names,
            "max_starts": [rates[c].max_starts for c in names],
            "period_s": [rates[c].period_s for c in names],
        },
    )
    return {str(row["cls"]): cast(int, row["allowed"]) for row in await cursor.fetchall()}


async def heartbeat(conn: Connection, job: ClaimedJob, *, lease_s: float) -> int:
    """Extend the lease (unless another transaction locks the row: then the claim is only
    confirmed); returns the job's current revision. Raises `LeaseLost`."""
    cursor = await conn.execute(
        _QUERIES.heartbeat_job,
        {"id": job.id, "claim_token": job.claim_token, "lease_s": lease_s},
    )
    row = await cursor.fetchone()
    if row is None:
        raise LeaseLost(job.id, "heartbeat")
    return cast(int, row["revision"])


@dataclass(frozen=True, slots=True)
class Heartbeats:
    """What one batched heartbeat found: the claim tokens still held, and among them
    those whose rows another transaction locked (lease not extended this time)."""

    held: frozenset[uuid.UUID]
    busy: frozenset[uuid.UUID] = frozenset()


async def heartbeat_many(
    conn: Connection, jobs: Sequence[ClaimedJob], *, lease_s: float
) -> Heartbeats:
    """Extend the leases of many jobs in one statement, never waiting for a row another
    transaction locks; the claims not in `held` lost their lease."""
    if not jobs:
        return Heartbeats(frozenset())
    cursor = await conn.execute(
        _QUERIES.heartbeat_jobs,
        {
            "ids": [j.id for j in jobs],
            "claim_tokens": [j.claim_token for j in jobs],
            "lease_s": lease_s,
        },
    )
    rows = await cursor.fetchall()
    return Heartbeats(
        held=frozenset(cast(uuid.UUID, r["claim_token"]) for r in rows),
        busy=frozenset(cast(uuid.UUID, r["claim_token"]) for r in rows if r["busy"]),
    )


class Completion(StrEnum):
    COMPLETED = "completed"
    REQUEUED = "requeued"  # the revision changed while it ran: back to pending
    FAILED = "failed"  # a `Done` with a failure: ended failed
    LOST = "lost"  # the claim no longer holds the job: nothing written
    DEFERRED = "deferred"  # its row (or parent) is locked by another transaction: try again


@dataclass(frozen=True, slots=True)
class Failure:
    """A terminal failure to record instead of a completion."""

    kind: FailureKind
    error: str


@dataclass(frozen=True, slots=True)
class Done:
    """A finished job waiting to be recorded: completed with its JSON result (or None), or,
    with `failure`, ended failed (a result that cannot be stored, say)."""

    job: ClaimedJob
    result: Mapping[str, Any] | None = None
    failure: Failure | None = None


@dataclass(slots=True)
class Settled:
    """What recording finished jobs did: per job, and the parents that ended with them."""

    statuses: dict[uuid.UUID, Completion] = field(default_factory=dict)
    parents_ended: dict[uuid.UUID, str] = field(default_factory=dict)
    steps_released: int = 0  # workflow steps whose last dependency ended here


async def lock_parents(conn: Connection, parent_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Lock waiting parents (id order) before a child's terminal write, skipping those
    another transaction holds; returns the parents locked. Needs a transaction."""
    if not parent_ids:
        return []
    cursor = await conn.execute(_QUERIES.lock_parents, {"ids": sorted(set(parent_ids))})
    return [cast(uuid.UUID, r["id"]) for r in await cursor.fetchall()]


async def reconcile_parents(
    conn: Connection, parent_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """End the given waiting parents whose children are all terminal; returns the parents
    ended and their status. Call after `lock_parents` in the same transaction."""
    if not parent_ids:
        return {}
    cursor = await conn.execute(
        _QUERIES.reconcile_parents,
        {"ids": sorted(set(parent_ids))},
    )
    return {cast(uuid.UUID, r["id"]): str(r["status"]) for r in await cursor.fetchall()}


async def settle_many(
    conn: Connection,
    done: Sequence[Done],
    *,
    failpoints: Failpoints = NO_FAILPOINTS,
    outputs: OutputWriter | None = None,
    lock_timeout_s: float | None = None,
) -> Settled:
    """Record many claimed jobs' ends in one transaction: completions in one statement
    (plus one for changed revisions), failures in another, then the parents of those that
    ended are reconciled. A job whose row or parent another transaction locks is
    `Completion.DEFERRED`: nothing of it is written.

    `outputs` (for a single job) runs after the completion matched and before the parent
    is reconciled, so children it creates are counted. `lock_timeout_s` bounds any other
    lock wait of the transaction (see `bounded_transaction`).
    """
    settled = Settled()
    if not done:
        return settled
    parents = [d.job.parent_id for d in done if d.job.parent_id is not None]
    steps = [d.job.id for d in done if d.job.workflow_id is not None]
    async with bounded_transaction(
        conn,
        needed=bool(parents) or bool(steps) or outputs is not None,
        lock_timeout_s=lock_timeout_s,
    ):
        locked = await lock_parents(conn, parents)
        # A step whose dependent another transaction holds ends on a later try.
        waiting = await steps_release.lock_dependents(conn, steps)
        for d in done:
            if d.job.id in waiting:
                settled.statuses[d.job.id] = Completion.DEFERRED
        completing = [d for d in done if d.failure is None and d.job.id not in waiting]
        failing = [d for d in done if d.failure is not None and d.job.id not in waiting]
        if completing:
            settled.statuses.update(await _complete(conn, completing, locked))
        if failing:
            settled.statuses.update(await _fail(conn, failing, locked))
        if outputs is not None and settled.statuses.get(done[0].job.id) is Completion.COMPLETED:
            await outputs(conn)
        ended = [
            d.job.parent_id
            for d in done
            if d.job.parent_id
            and settled.statuses[d.job.id] in (Completion.COMPLETED, Completion.FAILED)
        ]
        if ended:
            failpoints.hit("child.before_reconcile")
            settled.parents_ended = await reconcile_parents(conn, ended)
        steps_ended = {
            d.job.id: settled.statuses[d.job.id] is Completion.COMPLETED
            for d in done
            if d.job.workflow_id is not None
            and settled.statuses[d.job.id] in (Completion.COMPLETED, Completion.FAILED)
        }
        if steps_ended:
            settled.steps_released = await steps_release.release_dependents(conn, steps_ended)
    return settled


async def _complete(
    conn: Connection, done: Sequence[Done], locked_parents: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Completion]:
    cursor = await conn.execute(
        _QUERIES.complete_jobs,
        {
            "ids": [d.job.id for d in done],
            "claim_tokens": [d.job.claim_token for d in done],
            "revisions": [d.job.revision for d in done],
            "results": [None if d.result is None else json.dumps(d.result) for d in done],
            "locked_parents": list(locked_parents),
        },
    )
    statuses = {
        cast(uuid.UUID, row["id"]): Completion.DEFERRED if row["deferred"] else Completion.COMPLETED
        for row in await cursor.fetchall()
    }
    rest = [d.job for d in done if d.job.id not in statuses]
    if rest:
        cursor = await conn.execute(
            _QUERIES.requeue_jobs,
            {"ids": [j.id for j in rest], "claim_tokens": [j.claim_token for j in rest]},
        )
        requeued = {
            cast(uuid.UUID, r["id"]): Completion.DEFERRED if r["deferred"] else Completion.REQUEUED
            for r in await cursor.fetchall()
        }
        for job in rest:
            statuses[job.id] = requeued.get(job.id, Completion.LOST)
    return statuses


async def _fail(
    conn: Connection, done: Sequence[Done], locked_parents: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Completion]:
    failures = [d.failure for d in done if d.failure is not None]
    cursor = await conn.execute(
        _QUERIES.fail_jobs,
        {
            "ids": [d.job.id for d in done],
            "claim_tokens": [d.job.claim_token for d in done],
            "failure_kinds": [str(f.kind) for f in failures],
            "errors": [storable_text(f.error)[:ERROR_MAX_CHARS] for f in failures],
            "locked_parents": list(locked_parents),
        },
    )
    found = {
        cast(uuid.UUID, row["id"]): Completion.DEFERRED if row["deferred"] else Completion.FAILED
        for row in await cursor.fetchall()
    }
    return {d.job.id: found.get(d.job.id, Completion.LOST) for d in done}


async def complete_many(conn: Connection, done: Sequence[Done]) -> dict[uuid.UUID, Completion]:
    """Complete many claimed jobs with one statement (plus one for changed revisions)."""
    return (await settle_many(conn, done)).statuses


async def complete_fenced(
    pool: AsyncConnectionPool[Connection],
    job: ClaimedJob,
    *,
    result: Mapping[str, Any] | None,
    outputs: OutputWriter | None,
    failpoints: Failpoints = NO_FAILPOINTS,
    lock_timeout_s: float | None = None,
) -> Completion:
    """Complete one job and write its business outputs in ONE transaction.

    The completion re-checks claim token and revision first (and locks the row); outputs
    are written only when it matched, so a stale worker never writes. When the revision
    changed the job goes back to pending and the outputs are dropped. Raises `LeaseLost`
    when the claim no longer holds the job, `RowLocked` when another transaction locks its
    row; an error in `outputs` rolls everything back (a lock wait past `lock_timeout_s`
    too, as `psycopg.errors.LockNotAvailable`).
    """
    async with pool.connection() as conn:
        settled = await settle_many(
            conn,
            [Done(job, result)],
            failpoints=failpoints,
            outputs=outputs,
            lock_timeout_s=lock_timeout_s,
        )
    status = settled.statuses[job.id]
    if status is Completion.LOST:
        raise LeaseLost(job.id, "complete")
    if status is Completion.DEFERRED:
        raise RowLocked(job.id, "complete")
    return status


async def retry_later(conn: Connection, job: ClaimedJob, *, delay_s: float, error: str) -> None:
    """Back to pending after `delay_s` (database time). Raises `LeaseLost` or `RowLocked`."""
    cursor = await conn.execute(
        _QUERIES.retry_job,
        {
            "id": job.id,
            "claim_token": job.claim_token,
            "delay_s": delay_s,
            "error": storable_text(error)[:ERROR_MAX_CHARS],
        },
    )
    _written(await cursor.fetchone(), job, "retry")


def _written(row: Mapping[str, Any] | None, job: ClaimedJob, write: str) -> None:
    """Raise unless a single CAS write's row says it was written."""
    if row is None:
        raise LeaseLost(job.id, write)
    if row["deferred"]:
        raise RowLocked(job.id, write)


async def fail(
    conn: Connection,
    job: ClaimedJob,
    *,
    kind: FailureKind,
    error: str,
    failpoints: Failpoints = NO_FAILPOINTS,
    lock_timeout_s: float | None = None,
) -> dict[uuid.UUID, str]:
    """End the job `failed` with `kind` (and reconcile its parent in the same transaction);
    returns the parents that ended. Raises `LeaseLost` or `RowLocked`."""
    settled = await settle_many(
        conn,
        [Done(job, failure=Failure(kind, error))],
        failpoints=failpoints,
        lock_timeout_s=lock_timeout_s,
    )
    status = settled.statuses[job.id]
    if status is Completion.LOST:
        raise LeaseLost(job.id, "fail")
    if status is Completion.DEFERRED:
        raise RowLocked(job.id, "fail")
    return settled.parents_ended


async def release(conn: Connection, job: ClaimedJob) -> None:
    """Give the job back (pending now, attempt undone, workers woken). Raises `LeaseLost`
    or `RowLocked`."""
    cursor = await conn.execute(
        _QUERIES.release_job, {"id": job.id, "claim_token": job.claim_token}
    )
    _written(await cursor.fetchone(), job, "release")


async def rescue_expired(conn: Connection, *, limit: int = 1000) -> dict[uuid.UUID, str]:
    """Expired leases: back to pending with attempts left, else `failed` / lease_expired
    (reconciling the parents of children that failed, parents locked first).

    Returns the new status of every rescued job.
    """
    async with _transaction(conn):
        cursor = await conn.execute(_QUERIES.lock_expired_parents)
        locked = [cast(uuid.UUID, r["id"]) for r in await cursor.fetchall()]
        cursor = await conn.execute(
            _QUERIES.rescue_expired_jobs, {"limit": limit, "locked_parents": locked}
        )
        rows = await cursor.fetchall()
        failed_parents = [
            cast(uuid.UUID, r["parent_id"])
            for r in rows
            if r["parent_id"] is not None and r["status"] == "failed"
        ]
        await reconcile_parents(conn, failed_parents)
        await _count_failed_steps(conn, [r for r in rows if r["status"] == "failed"])
    return {cast(uuid.UUID, row["id"]): str(row["status"]) for row in rows}


async def _count_failed_steps(conn: Connection, failed_rows: Sequence[Mapping[str, Any]]) -> None:
    """Count the ends of the workflow steps among `failed_rows` (jobs a maintenance path
    failed: a lease rescue out of attempts, an unserved type; each with its `workflow_id`)
    into their dependents, in that path's transaction, so they are released or ended now
    rather than by the step reconciler's next pass."""
    failed = {cast(uuid.UUID, r["id"]): False for r in failed_rows if r["workflow_id"] is not None}
    if failed:
        await steps_release.release_dependents(conn, failed)


async def fail_unserved(
    conn: Connection, *, after_s: float, limit: int = 1000
) -> dict[uuid.UUID, str]:
    """Fail, permanently, pending jobs whose type no worker has had a handler for during
    `after_s` (`queries/unserved_jobs.sql`), reconciling their parents (locked first);
    returns the failed jobs and their types."""
    async with _transaction(conn):
        cursor = await conn.execute(_QUERIES.unserved_jobs, {"after_s": after_s, "limit": limit})
        found = await cursor.fetchall()
        if not found:
            return {}
        parents = [cast(uuid.UUID, r["parent_id"]) for r in found if r["parent_id"] is not None]
        locked = set(await lock_parents(conn, parents))
        # A child whose parent another transaction holds waits for a later pass.
        found = [r for r in found if r["parent_id"] is None or r["parent_id"] in locked]
        cursor = await conn.execute(
            _QUERIES.fail_unserved_jobs,
            {
                "ids": [r["id"] for r in found],
                "reason": f"no worker has had its handler for {after_s:g} s",
            },
        )
        failed_rows = await cursor.fetchall()
        failed = {cast(uuid.UUID, r["id"]) for r in failed_rows}
        await reconcile_parents(
            conn,
            [
                cast(uuid.UUID, r["parent_id"])
                for r in found
                if r["id"] in failed and r["parent_id"]
            ],
        )
        await _count_failed_steps(conn, failed_rows)
    return {cast(uuid.UUID, r["id"]): str(r["type"]) for r in found if r["id"] in failed}


async def reconcile_stale_parents(conn: Connection, *, limit: int = 500) -> dict[uuid.UUID, str]:
    """The periodic repair: end waiting parents with no active child left."""
    async with _transaction(conn):
        cursor = await conn.execute(
            _QUERIES.lock_stale_parents,
            {"limit": limit},
        )
        ids = [cast(uuid.UUID, r["id"]) for r in await cursor.fetchall()]
        return await reconcile_parents(conn, ids)


async def cancel(
    conn: Connection, job_id: uuid.UUID, *, lock_timeout_s: float | None = None
) -> dict[str, Any] | None:
    """Cancel an active job, its active children, and reconcile its parent, in one
    transaction (parent locked first). Returns the cancelled row, or None when the job was
    not active. Raises `RowLocked` when another transaction holds the parent, and
    `psycopg.errors.LockNotAvailable` when the job's row (or a child's) stays locked past
    `lock_timeout_s`; nothing is written then."""
    async with bounded_transaction(conn, lock_timeout_s=lock_timeout_s):
        cursor = await conn.execute(_QUERIES.get_parent_id, {"id": job_id})
        found = await cursor.fetchone()
        if found is None:
            return None
        parent_id = cast(uuid.UUID | None, found["parent_id"])
        if parent_id is not None and not await lock_parents(conn, [parent_id]):
            raise RowLocked(parent_id, "cancel")
        cursor = await conn.execute(_QUERIES.cancel_job, {"id": job_id})
        row = await cursor.fetchone()
        if row is None:
            return None
        await conn.execute(_QUERIES.cancel_children, {"id": job_id})
        if parent_id is not None:
            await reconcile_parents(conn, [parent_id])
    return dict(row)
