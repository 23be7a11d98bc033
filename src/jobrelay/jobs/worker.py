"""The jobs worker: claim, run, heartbeat, settle (DESIGN.md section 3).

One `Worker` per process runs three loops of the same shape (keyword-only validated
construction, `start`/`stop`, named tasks, log-and-continue):

* `jobrelay-worker-claim`: in one transaction, records the jobs finished since the last
  cycle (ONE `complete_jobs` statement for the batch) and claims up to the free slots (ONE
  `claim_jobs` statement); runs each job in its own task; waits for a free slot, or for the
  poll interval when nothing was available. One commit per cycle, not two per job.
* `jobrelay-worker-flush`: records finished jobs (same batched statement) while the claim
  loop is idle or stopping, so a completion never waits for the next claim;
* `jobrelay-worker-rescue`: reclaims expired leases of any worker.

Each running job has one heartbeat (started after a third of the lease, so short jobs never
pay for it). A heartbeat that matches no row means the lease is lost: the heartbeat cancels
the handler's task and nothing more is written for that claim. Jobs with fenced outputs
are completed one by one in a transaction with their outputs (`claims.complete_fenced`).

The later worker issue adds per-class slots, global caps, parents, LISTEN/NOTIFY and a
graceful drain: `WorkerConfig.classes`, `_free_slots` and `_claim_once` are the seams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import Complete, Fail, FailureKind, LeaseLost, Outcome, Retry
from jobrelay.domain.retry import ErrorClass, GiveUp, RetryAfter, RetryPolicy, classify
from jobrelay.jobs import claims
from jobrelay.jobs.claims import ALL_CLASSES, Completion, Done
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.registry import JobContext, JobType, Registry

log = logging.getLogger("jobrelay.jobs.worker")
T = TypeVar("T")
_DEFAULT_POLICY = RetryPolicy()
_FLUSH_MAX = 1000


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = 10
    lease_s: float = 30.0
    poll_interval_s: float = 0.05
    rescue_interval_s: float = 5.0
    shutdown_grace_s: float = 10.0
    classes: tuple[str, ...] = ALL_CLASSES
    worker_id: str = field(default_factory=default_worker_id)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        for name in ("lease_s", "poll_interval_s", "rescue_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.shutdown_grace_s < 0:
            raise ValueError(f"shutdown_grace_s must be >= 0, got {self.shutdown_grace_s}")
        unknown = set(self.classes) - set(ALL_CLASSES)
        if not self.classes or unknown:
            raise ValueError(f"classes must be a non-empty subset of {ALL_CLASSES}: {unknown}")

    @property
    def heartbeat_interval_s(self) -> float:
        return self.lease_s / 3


@dataclass
class WorkerStats:
    """Counters for tests and logs; tests poll these (or the database), never sleep."""

    claimed: int = 0
    completed: int = 0
    requeued: int = 0
    retried: int = 0
    failed: int = 0
    lease_lost: int = 0
    released: int = 0
    rescued: int = 0
    errors: int = 0


@dataclass(slots=True)
class _Lease:
    lost: bool = False
    heartbeat: asyncio.Task[None] | None = None


class Worker:
    """Runs claimed jobs of the registry's types. `await start()`, later `await stop()`."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        registry: Registry,
        config: WorkerConfig,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._pool = pool
        self._registry = registry
        self.config = config
        self._jitter = jitter
        self.stats = WorkerStats()
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._task_jobs: dict[asyncio.Task[None], uuid.UUID] = {}
        self._wake = asyncio.Event()  # a slot freed, or stop requested
        self._stop_requested = asyncio.Event()
        self._flush_needed = asyncio.Event()
        self._done: list[Done] = []
        self._closing = False
        self._claim_idle = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("worker already started")
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="jobrelay-worker-claim"),
            asyncio.create_task(self._flush_loop(), name="jobrelay-worker-flush"),
            asyncio.create_task(self._rescue_loop(), name="jobrelay-worker-rescue"),
        ]
        log.info("worker %s started (concurrency %d)", self.worker_id, self.config.concurrency)

    async def stop(self) -> None:
        """Stop claiming, let running jobs finish for `shutdown_grace_s`, release the rest,
        record every completion, then stop the loops."""
        if not self._tasks:
            return
        self._stop_requested.set()
        self._wake.set()
        claim_task, flush_task, rescue_task = self._tasks
        await asyncio.gather(claim_task, return_exceptions=True)
        running = list(self._running.values())
        if running:
            _, late = await asyncio.wait(running, timeout=self.config.shutdown_grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._closing = True
        self._flush_needed.set()
        await asyncio.gather(flush_task, return_exceptions=True)
        rescue_task.cancel()
        await asyncio.gather(rescue_task, return_exceptions=True)
        self._tasks = []
        log.info("worker %s stopped: %s", self.worker_id, self.stats)

    async def run_until(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    # -- claim loop --------------------------------------------------------------------

    def _free_slots(self) -> int:
        return self.config.concurrency - len(self._running)

    async def _claim_once(self, limit: int) -> list[ClaimedJob]:
        """Record the completions buffered so far and claim up to `limit` jobs, in ONE
        transaction (one commit per cycle instead of two). On error the completions go back
        to the buffer; they are CAS writes, so writing them again later is safe."""
        done, self._done = self._done[:_FLUSH_MAX], self._done[_FLUSH_MAX:]
        try:
            async with self._pool.connection() as conn, conn.transaction():
                statuses = await claims.complete_many(conn, done) if done else {}
                jobs = await claims.claim(
                    conn,
                    worker_id=self.worker_id,
                    limit=limit,
                    lease_s=self.config.lease_s,
                    classes=self.config.classes,
                )
        except BaseException:
            self._done[:0] = done
            raise
        for status in statuses.values():
            self._count(status)
        return jobs

    async def _claim_loop(self) -> None:
        errors = 0
        while not self._stop_requested.is_set():
            free = self._free_slots()
            if free <= 0:
                self._wake.clear()
                if self._free_slots() <= 0 and not self._stop_requested.is_set():
                    await self._wake.wait()
                continue
            try:
                jobs = await self._claim_once(free)
            except Exception:
                errors += 1
                self.stats.errors += 1
                log.exception("claim failed (%d in a row); retrying", errors)
                await self._pause(min(5.0, 0.1 * 2 ** min(errors, 6)))
                continue
            errors = 0
            self.stats.claimed += len(jobs)
            for job in jobs:
                self._spawn(job)
            if len(jobs) < free:
                if self._done:
                    self._flush_needed.set()  # idle: record completions without waiting
                await self._pause(self.config.poll_interval_s)

    async def _pause(self, timeout_s: float) -> None:
        """Sleep `timeout_s` unless stopped meanwhile; completions are flushed meanwhile."""
        self._claim_idle = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_requested.wait(), timeout_s)
        finally:
            self._claim_idle = False

    def _spawn(self, job: ClaimedJob) -> None:
        task = asyncio.create_task(self._process(job), name=f"job:{job.type}:{job.id}")
        self._running[job.id] = task
        self._task_jobs[task] = job.id
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        job_id = self._task_jobs.pop(task, None)
        if job_id is not None:
            self._running.pop(job_id, None)
        self._wake.set()

    # -- one job -----------------------------------------------------------------------

    async def _process(self, job: ClaimedJob) -> None:
        job_type = self._registry.get(job.type)
        if job_type is None:
            await self._settle(job, None, Fail(f"unknown job type {job.type!r}"))
            return
        try:
            payload = job_type.payload_model.model_validate({**job.payload, "type": job.type})
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            await self._settle(job, job_type, Fail(f"invalid payload: {details}"))
            return
        assert job_type.handler is not None  # the registry refuses entries without one
        lease = _Lease()
        me = asyncio.current_task()
        assert me is not None
        timer = asyncio.get_running_loop().call_later(
            self.config.heartbeat_interval_s, self._start_heartbeat, job, me, lease
        )
        try:
            outcome: Outcome = await job_type.handler(JobContext(job, payload))
        except asyncio.CancelledError:
            if lease.lost:
                self.stats.lease_lost += 1
                log.warning("job %s: lease lost, handler stopped, nothing written", job.id)
                return
            await self._release_on_cancel(job)
            raise
        except Exception as exc:
            outcome = _outcome_of(exc)
        finally:
            timer.cancel()
            if lease.heartbeat is not None:
                lease.heartbeat.cancel()
        if lease.lost:
            self.stats.lease_lost += 1
            return
        await self._settle(job, job_type, outcome)

    def _start_heartbeat(self, job: ClaimedJob, handler: asyncio.Task[Any], lease: _Lease) -> None:
        lease.heartbeat = asyncio.create_task(
            self._heartbeat_loop(job, handler, lease), name=f"heartbeat:{job.id}"
        )

    async def _heartbeat_loop(
        self, job: ClaimedJob, handler: asyncio.Task[Any], lease: _Lease
    ) -> None:
        while True:
            try:
                async with self._pool.connection() as conn:
                    await claims.heartbeat(conn, job, lease_s=self.config.lease_s)
            except LeaseLost:
                lease.lost = True
                handler.cancel()
                return
            except Exception:
                # The database may be briefly away; the lease decides, so keep trying.
                log.warning("heartbeat of job %s failed; retrying", job.id, exc_info=True)
            await asyncio.sleep(self.config.heartbeat_interval_s)

    async def _release_on_cancel(self, job: ClaimedJob) -> None:
        try:
            async with self._pool.connection() as conn:
                await claims.release(conn, job)
            self.stats.released += 1
        except Exception:
            log.warning("could not release job %s; its lease will expire", job.id, exc_info=True)

    async def _settle(
        self, job: ClaimedJob, job_type: JobType[Any] | None, outcome: Outcome
    ) -> None:
        """Record the outcome with a CAS write; never raises (the lease covers the rest)."""
        try:
            await self._record(job, job_type, outcome)
        except LeaseLost as exc:
            self.stats.lease_lost += 1
            log.warning("%s", exc)
        except Exception:
            self.stats.errors += 1
            log.exception("could not record the outcome of job %s; its lease will expire", job.id)

    async def _record(
        self, job: ClaimedJob, job_type: JobType[Any] | None, outcome: Outcome
    ) -> None:
        if isinstance(outcome, Complete):
            if outcome.outputs is None:
                self._done.append(Done(job, outcome.result))
                if self._claim_idle or self._stop_requested.is_set():
                    self._flush_needed.set()  # else the next claim records it
                return
            complete = outcome
            try:
                status = await self._with_db_retry(
                    lambda: claims.complete_fenced(
                        self._pool, job, result=complete.result, outputs=complete.outputs
                    )
                )
            except (LeaseLost, psycopg.OperationalError):
                raise
            except Exception as exc:  # the outputs failed: rolled back, now a failed attempt
                await self._record_failure(job, job_type, _outcome_of(exc))
            else:
                self._count(status)
            return
        await self._record_failure(job, job_type, outcome)

    async def _record_failure(
        self, job: ClaimedJob, job_type: JobType[Any] | None, outcome: Retry | Fail
    ) -> None:
        policy = job_type.retry if job_type is not None else _DEFAULT_POLICY
        decision: RetryAfter | GiveUp
        if isinstance(outcome, Retry):
            decision = policy.decide(
                attempt=job.attempt_count,
                max_attempts=job.max_attempts,
                error=ErrorClass.RETRYABLE,
                jitter=self._jitter(),
                delay_s=outcome.delay_s,
            )
            error = outcome.error
        else:
            decision = GiveUp(FailureKind.PERMANENT)
            error = outcome.error
        if isinstance(decision, RetryAfter):
            await self._with_db(
                lambda conn: claims.retry_later(conn, job, delay_s=decision.delay_s, error=error)
            )
            self.stats.retried += 1
        else:
            await self._with_db(
                lambda conn: claims.fail(conn, job, kind=decision.kind, error=error)
            )
            self.stats.failed += 1

    def _count(self, status: Completion) -> None:
        if status is Completion.COMPLETED:
            self.stats.completed += 1
        elif status is Completion.REQUEUED:
            self.stats.requeued += 1
        else:
            self.stats.lease_lost += 1

    async def _with_db(self, action: Callable[[Connection], Awaitable[T]]) -> T:
        async def run() -> T:
            async with self._pool.connection() as conn:
                return await action(conn)

        return await self._with_db_retry(run)

    async def _with_db_retry(self, action: Callable[[], Awaitable[T]]) -> T:
        """Retry `action` while the database is unreachable, for at most one lease."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.lease_s
        delay = 0.05
        while True:
            try:
                return await action()
            except psycopg.OperationalError:
                if loop.time() + delay > deadline:
                    raise
                log.warning("database unavailable; retrying in %.2fs", delay, exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- batched completions -----------------------------------------------------------

    async def _flush_loop(self) -> None:
        errors = 0
        while True:
            await self._flush_needed.wait()
            self._flush_needed.clear()
            if not self._done:
                if self._closing:
                    return
                continue
            batch, self._done = self._done[:_FLUSH_MAX], self._done[_FLUSH_MAX:]
            if self._done:
                self._flush_needed.set()
            try:
                async with self._pool.connection() as conn:
                    statuses = await claims.complete_many(conn, batch)
            except Exception:
                errors += 1
                self.stats.errors += 1
                log.exception("recording %d completions failed; retrying", len(batch))
                self._done[:0] = batch
                self._flush_needed.set()
                await asyncio.sleep(min(2.0, 0.05 * 2 ** min(errors, 6)))
                continue
            errors = 0
            for status in statuses.values():
                self._count(status)

    # -- lease rescue ------------------------------------------------------------------

    async def _rescue_loop(self) -> None:
        while True:
            try:
                async with self._pool.connection() as conn:
                    rescued = await claims.rescue_expired(conn)
                if rescued:
                    self.stats.rescued += len(rescued)
                    log.info("rescued %d jobs with expired leases", len(rescued))
            except Exception:
                self.stats.errors += 1
                log.exception("lease rescue failed; retrying next interval")
            await asyncio.sleep(self.config.rescue_interval_s)


def _outcome_of(exc: BaseException) -> Retry | Fail:
    message = f"{type(exc).__name__}: {exc}"
    if classify(exc) is ErrorClass.PERMANENT:
        return Fail(message)
    return Retry(message)
