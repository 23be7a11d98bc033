""" "Why isn't this job running?": one answer from the database's state, with the blocking
thing named (issue 14).

`diagnose(conn, job_id, registry=..., global_caps=...)` reads everything in one statement
(`queries/diagnose_job.sql`: one snapshot, one database time) and `decide` turns those facts
into a `Diagnosis`: a `Reason` code, a sentence, and the blocker by name (job ids, counts,
times). `also` lists the other blockers that hold at the same time, in precedence order.

Precedence. A job that is not pending has one state-based answer: `completed`; `cancelled`
(or `superseded` when duplicate reconciliation cancelled it in favour of another job, which
is named); `failed` jobs are `unknown_type` when their type is not registered,
`attempts_exhausted` after a retryable failure or lease expiry on the last attempt, else
`failed` (a permanent failure); `in_progress` jobs are `row_locked` when another session
holds a lock on the row (its completion, heartbeat or failure is deferred until the lock
goes, issue 40; `running` follows in `also`), else `running` (holder and lease named) or
`lease_expired` (a live worker's rescuer will take it back). A row lock is named as "row
locked by pid N (application, state, since T)", from the row's `xmax` and `pg_locks`.
A pending job is checked from what never resolves by itself to what does:

1. `unknown_type`: not in the registry of the process that asks (a worker claims only the
   types it has handlers for, so a job of a type no live worker has stays pending).
2. `waiting_for_children`: a parent is never claimed; it ends with its children (counts).
3. `claims_paused`: the operator's pause (`jobs_control`) stops every claim.
4. `no_worker`: no live worker (a `worker_heartbeat` newer than `stale_after_s`, default
   three of the worker's own heartbeat intervals, i.e. one lease) serves its class and has
   a handler for its type (the heartbeat row's `job_types`).
5. `backoff` (after a failed attempt) or `delayed` (enqueued with a delay): `available_at`
   is in the future; the seconds left are computed with database time.
6. `source_busy`: another job of its `source_key` is running (named).
7. `source_queue`: an earlier job of its source runs first (named, with the count ahead).
8. `class_at_cap`: its class has a global cap (`JOBRELAY_JOBS_GLOBAL_CAPS`, passed in: the
   database does not know it) and that many running jobs hold the class's slots (named).
9. `rate_limited`: its class has a rate limit (declared with the class or
   `JOBRELAY_JOBS_RATES`; the claimers record it in `job_rate_windows`) and the starts in
   the last period reached it: "rate limited until T", when the oldest of them ages out.
   Being held back is not an attempt (`attempt_count` does not change).
10. `row_locked`: another session holds a lock on its row (`SELECT ... FOR UPDATE` in psql,
   a report, a foreign key of an application table): claims skip a row they cannot lock.
11. `claimable`: nothing blocks it; a worker should take it soon (`ahead_in_class` counts the
   claimable jobs of its class without a source key before it, up to 10,000).

Superseded and merged: enqueue with policy `supersede` or `merge` rewrites the active job in
place (same id, revision bumped), so no job is ever replaced by another one there; the only
jobs replaced by another are the losers of duplicate reconciliation (`jobrelay ops
reconcile-duplicates`), cancelled with `last_error` "superseded by ID", "merged into ID" or
"duplicate of ID". Those are `superseded`, with that job named. A job cancelled with its
parent names the parent.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

import psycopg

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import NotFound
from jobrelay.domain.jobs_config import Rate
from jobrelay.jobs.registry import Registry

_QUERIES = Queries("jobrelay.jobs")


class Reason(StrEnum):
    """Why a job is (not) running, in the order pending jobs are checked (see the module)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    FAILED = "failed"
    RUNNING = "running"
    LEASE_EXPIRED = "lease_expired"
    UNKNOWN_TYPE = "unknown_type"
    WAITING_FOR_CHILDREN = "waiting_for_children"
    CLAIMS_PAUSED = "claims_paused"
    NO_WORKER = "no_worker"
    BACKOFF = "backoff"
    DELAYED = "delayed"
    SOURCE_BUSY = "source_busy"
    SOURCE_QUEUE = "source_queue"
    CLASS_AT_CAP = "class_at_cap"
    RATE_LIMITED = "rate_limited"
    ROW_LOCKED = "row_locked"
    CLAIMABLE = "claimable"


@dataclass(frozen=True, slots=True)
class BlockingJob:
    """A job named as the blocker: the running job of the source, the one ahead of it, a
    holder of a class slot, the job that replaced it, or its cancelled parent."""

    id: uuid.UUID
    type: str
    status: str
    claimed_by: str | None = None
    lease_expires_at: dt.datetime | None = None
    class_slot: int | None = None


@dataclass(frozen=True, slots=True)
class RowLocker:
    """A session holding a lock on the job's row: its backend pid, application name (or
    user), state (`active`, `idle in transaction`, ...), since when its transaction runs,
    and the lock mode when PostgreSQL records it (several lockers: `keysh`, `forupd`, ...)."""

    pid: int
    application: str
    state: str
    since: dt.datetime
    mode: str | None = None


@dataclass(frozen=True, slots=True)
class ChildCounts:
    total: int
    active: int
    completed: int
    failed: int
    cancelled: int


@dataclass(frozen=True, slots=True)
class PauseState:
    claims_paused: bool
    reason: str | None
    updated_by: str
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class WorkersSeen:
    """Workers of the job's class: the live ones (at most 20 ids), the last one seen (live
    or not), and the live workers of any class."""

    live: tuple[str, ...]
    live_count: int
    live_any_class: int
    last_worker: str | None
    last_heartbeat_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The answer: `reason` and `message`, then the facts that name the blocker."""

    job_id: uuid.UUID
    type: str
    status: str
    reason: Reason
    message: str
    also: tuple[Reason, ...]
    checked_at: dt.datetime
    concurrency_class: str
    source_key: str | None
    attempt_count: int
    max_attempts: int
    available_at: dt.datetime
    wait_seconds: float
    last_error: str | None
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    holder_alive: bool | None
    blocking_jobs: tuple[BlockingJob, ...]
    children: ChildCounts | None
    pause: PauseState
    workers: WorkersSeen
    global_cap: int | None
    class_running: int
    ahead_in_class: int
    replaced_by: uuid.UUID | None
    rate_limit: str | None = None
    rate_limited_until: dt.datetime | None = None
    row_locked_by: tuple[RowLocker, ...] = ()


async def diagnose(
    conn: Connection,
    job_id: uuid.UUID,
    *,
    registry: Registry,
    global_caps: Mapping[str, int] | None = None,
    stale_after_s: float | None = None,
) -> Diagnosis:
    """Why job `job_id` is not running (or is); raises `NotFound` for an unknown id.

    `global_caps`: the workers' `JOBRELAY_JOBS_GLOBAL_CAPS` (the database does not store
    them). `stale_after_s`: a worker whose heartbeat is older is not live (default: three
    of its own heartbeat intervals).
    """
    cursor = await conn.execute(_QUERIES.diagnose_job, {"id": job_id, "stale_s": stale_after_s})
    row = await cursor.fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    known = registry.get(str(row["type"])) is not None
    lockers = await row_lockers(conn, job_id) if row["status"] in _LOCKABLE else ()
    return decide(row, known_type=known, caps=global_caps or {}, lockers=lockers)


# The statuses whose row lives in `jobs` and can be locked (finished rows moved away).
_LOCKABLE = frozenset({"pending", "in_progress"})


async def row_lockers(conn: Connection, job_id: uuid.UUID) -> tuple[RowLocker, ...]:
    """The sessions holding a lock on the job's row (empty: none, or the row is gone).

    One locker is the row's `xmax`; several are a MultiXact, whose members are read in a
    savepoint because asking for the members of a plain transaction id raises."""
    params = {"id": job_id}
    rows = await (await conn.execute(_QUERIES.row_lockers, params)).fetchall()
    if not rows:
        try:
            async with conn.transaction():
                rows = await (await conn.execute(_QUERIES.row_lockers_multi, params)).fetchall()
        except psycopg.Error:
            rows = []  # xmax was no MultiXact (a finished updater): nobody holds the row
    return tuple(
        RowLocker(
            pid=int(str(r["pid"])),
            application=str(r["application"]),
            state=str(r["state"]),
            since=cast(dt.datetime, r["since"]),
            mode=None if r["mode"] is None else str(r["mode"]),
        )
        for r in rows
    )


def decide(
    row: Mapping[str, Any],
    *,
    known_type: bool,
    caps: Mapping[str, int],
    lockers: Sequence[RowLocker] = (),
) -> Diagnosis:
    """The diagnosis of the facts `diagnose_job.sql` (and `row_lockers`) read (pure)."""
    facts = _Facts(row, known_type, caps, tuple(lockers))
    reasons = facts.reasons()
    reason = reasons[0]
    return Diagnosis(
        job_id=row["id"],
        type=row["type"],
        status=row["status"],
        reason=reason,
        message=facts.message(reason),
        also=tuple(reasons[1:]),
        checked_at=row["checked_at"],
        concurrency_class=row["concurrency_class"],
        source_key=row["source_key"],
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
        available_at=row["available_at"],
        wait_seconds=facts.wait_s,
        last_error=row["last_error"],
        claimed_by=row["claimed_by"],
        lease_expires_at=row["lease_expires_at"],
        holder_alive=row["holder_alive"] if row["claimed_by"] is not None else None,
        blocking_jobs=facts.blocking(reason),
        children=facts.children,
        pause=PauseState(
            claims_paused=row["claims_paused"],
            reason=row["pause_reason"],
            updated_by=row["pause_updated_by"],
            updated_at=row["pause_updated_at"],
        ),
        workers=WorkersSeen(
            live=tuple(row["live_ids"] or ()),
            live_count=row["live_count"],
            live_any_class=row["live_workers_any_class"],
            last_worker=row["last_worker"],
            last_heartbeat_at=row["last_heartbeat_at"],
        ),
        global_cap=facts.cap,
        class_running=row["class_running"],
        ahead_in_class=row["ahead_in_class"],
        replaced_by=row["replaced_by_id"],
        rate_limit=facts.rate_limit,
        rate_limited_until=row["rate_limited_until"],
        row_locked_by=facts.lockers,
    )


def _when(at: dt.datetime | None) -> str:
    return "never" if at is None else at.isoformat(timespec="seconds")


class _Facts:
    def __init__(
        self,
        row: Mapping[str, Any],
        known_type: bool,
        caps: Mapping[str, int],
        lockers: tuple[RowLocker, ...],
    ) -> None:
        self.row = row
        self.lockers = lockers
        self.known_type = known_type
        self.cap = caps.get(row["concurrency_class"])
        self.wait_s = float(row["wait_s"] or 0.0)
        self.rate_limit = (
            None
            if row["rate_max_starts"] is None
            else str(Rate(row["rate_max_starts"], float(row["rate_period_s"])))
        )
        self.children = (
            ChildCounts(
                total=row["children_total"],
                active=row["children_active"],
                completed=row["children_completed"],
                failed=row["children_failed"],
                cancelled=row["children_cancelled"],
            )
            if row["role"] == "parent" or row["children_total"]
            else None
        )
        self.slot_holders = tuple(_holder(h) for h in _json_list(row["class_holders"]))

    def reasons(self) -> list[Reason]:
        row = self.row
        status = row["status"]
        if status == "completed":
            return [Reason.COMPLETED]
        if status == "cancelled":
            return [Reason.SUPERSEDED if row["replaced_by_id"] else Reason.CANCELLED]
        if status == "failed":
            if not self.known_type:
                return [Reason.UNKNOWN_TYPE]
            exhausted = row["attempt_count"] >= row["max_attempts"]
            if exhausted and row["failure_kind"] in ("retryable", "lease_expired"):
                return [Reason.ATTEMPTS_EXHAUSTED]
            return [Reason.FAILED]
        if status == "in_progress":
            expired = row["lease_expires_at"] <= row["checked_at"]
            running = Reason.LEASE_EXPIRED if expired else Reason.RUNNING
            return [Reason.ROW_LOCKED, running] if self.lockers else [running]
        return self._pending_reasons() or [Reason.CLAIMABLE]

    def _pending_reasons(self) -> list[Reason]:
        row = self.row
        found: list[Reason] = []
        if not self.known_type:
            found.append(Reason.UNKNOWN_TYPE)
        if row["role"] == "parent":
            found.append(Reason.WAITING_FOR_CHILDREN)
            return found  # a parent is never claimed: nothing else applies
        if row["claims_paused"]:
            found.append(Reason.CLAIMS_PAUSED)
        if not row["live_count"]:
            found.append(Reason.NO_WORKER)
        if self.wait_s > 0:
            found.append(Reason.BACKOFF if row["attempt_count"] > 0 else Reason.DELAYED)
        if row["source_holder_id"] is not None:
            found.append(Reason.SOURCE_BUSY)
        if row["source_head_id"] is not None:
            found.append(Reason.SOURCE_QUEUE)
        if self.cap is not None and row["class_running"] >= self.cap:
            found.append(Reason.CLASS_AT_CAP)
        if row["rate_limited_until"] is not None:
            found.append(Reason.RATE_LIMITED)
        if self.lockers:
            found.append(Reason.ROW_LOCKED)
        return found

    def blocking(self, reason: Reason) -> tuple[BlockingJob, ...]:
        row = self.row
        if reason is Reason.SOURCE_BUSY:
            return (
                BlockingJob(
                    id=row["source_holder_id"],
                    type=row["source_holder_type"],
                    status="in_progress",
                    claimed_by=row["source_holder_claimed_by"],
                    lease_expires_at=row["source_holder_lease_expires_at"],
                ),
            )
        if reason is Reason.SOURCE_QUEUE:
            return (
                BlockingJob(
                    id=row["source_head_id"], type=row["source_head_type"], status="pending"
                ),
            )
        if reason is Reason.CLASS_AT_CAP:
            return self.slot_holders
        if reason is Reason.SUPERSEDED:
            return (
                BlockingJob(
                    id=row["replaced_by_id"],
                    type=row["replaced_by_type"],
                    status=row["replaced_by_status"],
                ),
            )
        if reason is Reason.CANCELLED and row["parent_status"] == "cancelled":
            return (BlockingJob(id=row["parent_id"], type=row["parent_type"], status="cancelled"),)
        return ()

    def message(self, reason: Reason) -> str:
        row = self.row
        cls = row["concurrency_class"]
        attempts = f"{row['attempt_count']}/{row['max_attempts']} attempts"
        match reason:
            case Reason.COMPLETED:
                return f"completed at {_when(row['finished_at'])} after {attempts}"
            case Reason.CANCELLED:
                if row["parent_status"] == "cancelled":
                    return f"cancelled with its parent {row['parent_id']} ({row['parent_type']})"
                return f"cancelled at {_when(row['finished_at'])}"
            case Reason.SUPERSEDED:
                return (
                    f"cancelled by duplicate reconciliation: {row['replaced_how']} "
                    f"{row['replaced_by_id']} ({row['replaced_by_status']}), which does its work"
                )
            case Reason.ATTEMPTS_EXHAUSTED:
                return (
                    f"failed for good: {attempts} used ({row['failure_kind']}); last error: "
                    f"{row['last_error']}; `jobrelay jobs retry` gives it fresh attempts"
                )
            case Reason.FAILED:
                return f"failed permanently after {attempts}: {row['last_error']}"
            case Reason.RUNNING:
                alive = {True: "live", False: "stale", None: "unknown"}[row["holder_alive"]]
                return (
                    f"running on worker {row['claimed_by']} ({alive} heartbeat) since "
                    f"{_when(row['claimed_at'])}, attempt {attempts}, lease until "
                    f"{_when(row['lease_expires_at'])}"
                )
            case Reason.LEASE_EXPIRED:
                return (
                    f"its lease held by worker {row['claimed_by']} expired at "
                    f"{_when(row['lease_expires_at'])}; a live worker's lease rescuer puts it "
                    "back to pending (or fails it when its attempts are used up)"
                )
            case Reason.UNKNOWN_TYPE:
                return (
                    f"job type {row['type']!r} is not in the registry: no handler runs it "
                    "here; workers without its handler leave it pending; deploy or load the "
                    "app that declares it"
                )
            case Reason.WAITING_FOR_CHILDREN:
                c = self.children or ChildCounts(0, 0, 0, 0, 0)
                tail = (
                    "; every child has ended, a worker's parent reconciler ends it"
                    if c.active == 0
                    else ""
                )
                return (
                    f"a parent waiting for its children: {c.active} active, {c.completed} "
                    f"completed, {c.failed} failed, {c.cancelled} cancelled of {c.total}{tail}"
                )
            case Reason.CLAIMS_PAUSED:
                why = f" ({row['pause_reason']})" if row["pause_reason"] else ""
                return (
                    f"claims are paused{why} by {row['pause_updated_by']} since "
                    f"{_when(row['pause_updated_at'])}; `jobrelay ops resume` lifts it"
                )
            case Reason.NO_WORKER:
                last = (
                    f"; last seen: {row['last_worker']} at {_when(row['last_heartbeat_at'])}"
                    if row["last_worker"]
                    else "; no worker has served it"
                )
                if row["live_of_class"]:
                    return (
                        f"no live worker serves type {row['type']!r}: the "
                        f"{row['live_of_class']} live worker(s) of class {cls!r} have no "
                        "handler for it, so it stays pending until a worker with one runs "
                        f"(a deploy that adds the type still rolling out?){last}"
                    )
                return (
                    f"no live worker serves class {cls!r} ({row['live_workers_any_class']} "
                    f"live workers of other classes){last}"
                )
            case Reason.BACKOFF:
                return (
                    f"waiting {self.wait_s:.1f} s, until {_when(row['available_at'])}, to retry "
                    f"after failed attempt {attempts}: {row['last_error']}"
                )
            case Reason.DELAYED:
                return f"delayed: available in {self.wait_s:.1f} s, at {_when(row['available_at'])}"
            case Reason.SOURCE_BUSY:
                return (
                    f"its source {row['source_key']!r} is running job "
                    f"{row['source_holder_id']} ({row['source_holder_type']}) on worker "
                    f"{row['source_holder_claimed_by']}, lease until "
                    f"{_when(row['source_holder_lease_expires_at'])}"
                )
            case Reason.SOURCE_QUEUE:
                return (
                    f"{row['source_ahead']} job(s) of its source {row['source_key']!r} run "
                    f"before it; next: {row['source_head_id']} ({row['source_head_type']})"
                )
            case Reason.CLASS_AT_CAP:
                ids = ", ".join(str(h.id) for h in self.slot_holders)
                return (
                    f"class {cls!r} is at its global cap: {row['class_running']}/{self.cap} "
                    f"slots held by {ids}"
                )
            case Reason.RATE_LIMITED:
                return (
                    f"rate limited until {_when(row['rate_limited_until'])}: class {cls!r} "
                    f"started {row['rate_in_window']} job(s) in the last "
                    f"{row['rate_period_s']:g} s (limit {self.rate_limit})"
                )
            case Reason.ROW_LOCKED:
                held = "; ".join(_locker(locker) for locker in self.lockers)
                if row["status"] == "in_progress":
                    return (
                        f"{held}: its worker's writes of this row (completion, heartbeat, "
                        "failure) wait until that transaction ends; it keeps running on "
                        f"worker {row['claimed_by']}, lease until {_when(row['lease_expires_at'])}"
                    )
                return (
                    f"{held}: until that transaction ends a claim skips the row (unless the "
                    "lock is only FOR KEY SHARE) and its completion or cancel waits"
                )
            case Reason.CLAIMABLE:
                return (
                    f"pending and claimable: a worker should take it soon "
                    f"({row['ahead_in_class']} claimable job(s) of class {cls!r} before it, "
                    f"{row['live_count']} live worker(s) serve the class)"
                )
        raise AssertionError(reason)  # pragma: no cover - the match is exhaustive


def _locker(locker: RowLocker) -> str:
    mode = f", {locker.mode}" if locker.mode else ""
    return (
        f"row locked by pid {locker.pid} ({locker.application or 'no application name'}, "
        f"{locker.state}, since {_when(locker.since)}{mode})"
    )


def _json_list(value: Any) -> Sequence[Mapping[str, Any]]:
    if isinstance(value, str):
        value = json.loads(value)
    return list(value or [])


def _holder(item: Mapping[str, Any]) -> BlockingJob:
    lease = item.get("lease_expires_at")
    return BlockingJob(
        id=uuid.UUID(str(item["id"])),
        type=str(item["type"]),
        status="in_progress",
        claimed_by=item.get("claimed_by"),
        lease_expires_at=dt.datetime.fromisoformat(lease) if lease else None,
        class_slot=item.get("class_slot"),
    )
