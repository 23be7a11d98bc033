"""The executor: one run of one claimed job, from its payload to its recorded outcome.

`Executor.execute(run)` is the body of the task the producer starts for a job (River's
`internal/jobexecutor`: one run, one result). In order:

1. An unknown type or a payload its model refuses is a permanent failure
   (docs/explanation/state_machine.md, "Handler outcomes").
2. The handler runs with a `JobContext` under the type's timeout (`JobType.timeout_s`);
   a timeout is a retryable outcome.
3. An exception is classified (`domain.retry.classify`: retryable unless it is a known
   permanent kind) and its message becomes the outcome's error; the worker keeps running.
4. A cancellation is either a lost lease (the producer set `run.lost`: nothing is written,
   the new claim owns the job) or a stop past its grace (the claim is released at once:
   pending again, attempt undone, so another worker takes it without waiting for the lease).
5. The outcome is recorded with a CAS write fenced by the claim token: a plain `Complete`
   goes to the completer's batch (keeping its slot while the flush is behind, see
   `jobs.completer`); a `Complete` with fenced outputs commits in its own transaction
   (a failure there rolls back and becomes a failed attempt); `Retry` and `Fail` go
   through the type's `RetryPolicy.decide` to `retry_later` or `fail`. A result
   PostgreSQL could not store (`domain.storable`: a NUL character, a lone surrogate, over
   `WorkerConfig.result_limit_bytes`) fails the job permanently instead, naming where. Each
   write retries while the database is unreachable, for at most one lease; a write that
   still fails is logged, and the lease covers the rest. A write whose row another
   transaction locks (`RowLocked`, or a lock wait past `lock_timeout_s`) is tried again
   every 50-500 ms while the claim holds, the run's lease kept meanwhile (`Run.locked`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.errors import LockNotAvailable
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import (
    Complete,
    Fail,
    FailureKind,
    LeaseLost,
    Outcome,
    Retry,
    RowLocked,
)
from jobrelay.domain.retry import ErrorClass, GiveUp, RetryAfter, RetryPolicy, classify
from jobrelay.domain.storable import unstorable
from jobrelay.jobs import claims, traces
from jobrelay.jobs.claims import Done
from jobrelay.jobs.completer import Completer
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import ClaimedJob, frees_claims
from jobrelay.jobs.registry import JobContext, JobType, Registry
from jobrelay.jobs.worker_config import WorkerConfig
from jobrelay.jobs.workflows import store as workflow_store
from jobrelay.loops import Backoff, retry

# A child of the worker's logger, so a level set for `jobrelay.jobs.worker` still applies.
log = logging.getLogger("jobrelay.jobs.worker.executor")
T = TypeVar("T")
_DEFAULT_POLICY = RetryPolicy()
# Recording one outcome retries from 50 ms up to 2 s while the database is unreachable.
_DB_BACKOFF = Backoff(base_s=0.05, cap_s=2.0)
# A write whose row another transaction locks is tried again 50 ms, 100 ms, ... 500 ms later.
_LOCKED_BACKOFF = Backoff(base_s=0.05, cap_s=0.5)


@dataclass(slots=True)
class Run:
    """One claimed job in this worker, from its claim to the end of its task.

    The producer creates it (held, `task` None), starts it (`started`, `task`) and marks
    it `lost` when the lease keeper finds its claim gone; the executor marks it `settling`
    once the handler returned, after which a lost lease no longer cancels it (its own CAS
    write decides), and `locked` while that write waits for another transaction's lock on
    the row (the lease keeper then keeps its lease again)."""

    job: ClaimedJob
    task: asyncio.Task[None] | None = None
    started: bool = False
    settling: bool = False
    lost: bool = False
    locked: bool = False


class Executor:
    """Runs claimed jobs of the registry's types and records their outcomes."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        registry: Registry,
        enqueuer: Enqueuer,
        completer: Completer,
        config: WorkerConfig,
        counters: WorkerCounters,
        freed: Callable[[], None],
        jitter: Callable[[], float] = random.random,
        failpoints: Failpoints = NO_FAILPOINTS,
    ) -> None:
        self._pool = pool
        self._registry = registry
        self._enqueuer = enqueuer
        self._completer = completer
        self._lease_s = config.lease_s
        self._lock_timeout_s = config.lock_timeout_s
        self._result_limit_bytes = config.result_limit_bytes
        # What a step's `ctx.fan_out` calls, built once for every run of this executor.
        self._add_steps = functools.partial(
            workflow_store.add_steps, enqueuer=enqueuer, max_steps=config.workflow_max_steps
        )
        self._capped = frozenset(config.global_caps)
        self._counters = counters
        self._freed = freed
        self._jitter = jitter
        self._failpoints = failpoints

    async def execute(self, run: Run) -> None:
        """Run `run.job`'s handler and record its outcome, in the attempt's run span
        (`jobs.traces`); never raises but the cancellation of a stop (after releasing the
        claim)."""
        with traces.run_span(run.job):
            await self._execute(run)
            if run.lost:
                traces.lease_lost()

    async def _execute(self, run: Run) -> None:
        job = run.job
        job_type = self._registry.get(job.type)
        if job_type is None:
            run.settling = True
            await self._settle(run, None, Fail(f"unknown job type {job.type!r}"))
            return
        try:
            payload = job_type.payload_model.model_validate({**job.payload, "type": job.type})
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            run.settling = True
            await self._settle(run, job_type, Fail(f"invalid payload: {details}"))
            return
        assert job_type.handler is not None  # the registry refuses entries without one
        started = time.perf_counter()
        context = JobContext(
            job,
            payload,
            self._pool,
            self._enqueuer.enqueue_many,
            self._add_steps,
        )
        deadline = asyncio.timeout(job_type.timeout_s)
        try:
            async with deadline:
                outcome: Outcome = await job_type.handler(context)
        except asyncio.CancelledError:
            if run.lost:
                self._counters.lost()
                log.warning("job %s: lease lost, handler stopped, nothing written", job.id)
                return
            await self.release(job)
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                outcome = Retry(f"timed out after {job_type.timeout_s} s (the type's timeout)")
            else:
                outcome = _outcome_of(exc)
            log.warning("job %s (%s) raised: %r", job.id, job.type, exc, exc_info=True)
        finally:
            self._counters.handler_ran(job, time.perf_counter() - started)
        run.settling = True
        if run.lost:
            self._counters.lost()
            return
        await self._settle(run, job_type, outcome)

    async def release(self, job: ClaimedJob) -> None:
        """Give the claim back (pending at once, attempt undone); on failure the lease
        expires instead."""
        try:
            async with self._pool.connection() as conn:
                await claims.release(conn, job)
            self._counters.released()
        except Exception:
            log.warning("could not release job %s; its lease will expire", job.id, exc_info=True)

    async def _settle(self, run: Run, job_type: JobType[Any] | None, outcome: Outcome) -> None:
        """Record the outcome with a CAS write; never raises (the lease covers the rest)."""
        job = run.job
        if isinstance(outcome, Complete):
            problem = unstorable(outcome.result, limit_bytes=self._result_limit_bytes)
            if problem is not None:
                log.warning("job %s: result cannot be stored (%s); failing it", job.id, problem)
                self._counters.refused("checked")
                outcome = Fail(f"result cannot be stored: {problem}")
        traces.settled(outcome)
        try:
            written = await self._record(run, job_type, outcome)
        except LeaseLost as exc:
            self._counters.lost()
            log.warning("%s", exc)
        except Exception:
            self._counters.error()
            log.exception("could not record the outcome of job %s; its lease will expire", job.id)
        else:
            if written and frees_claims(job, self._capped):
                self._freed()

    async def _record(self, run: Run, job_type: JobType[Any] | None, outcome: Outcome) -> bool:
        """Write the outcome now (True), or hand a plain completion to the completer
        (False)."""
        job = run.job
        if isinstance(outcome, Complete):
            if outcome.outputs is None:
                if self._completer.add(Done(job, outcome.result)):
                    await self._completer.until_recorded(job)
                return False
            complete = outcome
            try:
                status = await self._with_db_retry(
                    run,
                    lambda: claims.complete_fenced(
                        self._pool,
                        job,
                        result=complete.result,
                        outputs=complete.outputs,
                        failpoints=self._failpoints,
                        lock_timeout_s=self._lock_timeout_s,
                    ),
                )
            except (LeaseLost, psycopg.OperationalError):
                raise
            except Exception as exc:  # the outputs failed: rolled back, now a failed attempt
                log.warning("job %s: completing transaction failed: %s", job.id, exc)
                await self._record_failure(run, job_type, _outcome_of(exc))
            else:
                self._counters.completion(job, status)
            return True
        await self._record_failure(run, job_type, outcome)
        return True

    async def _record_failure(
        self, run: Run, job_type: JobType[Any] | None, outcome: Retry | Fail
    ) -> None:
        job = run.job
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
        else:
            decision = GiveUp(FailureKind.PERMANENT)
        error = outcome.error
        if isinstance(decision, RetryAfter):
            await self._with_db(
                run,
                lambda conn: claims.retry_later(conn, job, delay_s=decision.delay_s, error=error),
            )
            self._counters.retried(job)
        else:
            ended = await self._with_db(
                run,
                lambda conn: claims.fail(
                    conn,
                    job,
                    kind=decision.kind,
                    error=error,
                    failpoints=self._failpoints,
                    lock_timeout_s=self._lock_timeout_s,
                ),
            )
            self._counters.failed(job)
            self._counters.parents_ended(len(ended))

    async def _with_db(self, run: Run, action: Callable[[Connection], Awaitable[T]]) -> T:
        async def write() -> T:
            async with self._pool.connection() as conn:
                return await action(conn)

        return await self._with_db_retry(run, write)

    async def _with_db_retry(self, run: Run, action: Callable[[], Awaitable[T]]) -> T:
        """Retry `action` while the database is unreachable, for at most one lease, and
        while another transaction locks the job's row, for as long as the claim holds
        (each try is a CAS: a lost claim ends it with `LeaseLost`)."""

        async def reachable() -> T:
            return await retry(
                action,
                what="recording a job's outcome",
                retry_on=_unreachable,
                backoff=_DB_BACKOFF,
                budget_s=self._lease_s,
            )

        def locked(exc: BaseException) -> bool:
            if not isinstance(exc, RowLocked | LockNotAvailable):
                return False
            self._counters.deferred("outcome")
            run.locked = True  # the lease keeper keeps the lease while it waits
            return True

        try:
            return await retry(
                reachable,
                what="recording a job's outcome (its row is locked)",
                retry_on=locked,
                backoff=_LOCKED_BACKOFF,
                level=logging.DEBUG,
            )
        finally:
            run.locked = False


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, LockNotAvailable)


def _outcome_of(exc: BaseException) -> Retry | Fail:
    message = f"{type(exc).__name__}: {exc}"
    if classify(exc) is ErrorClass.PERMANENT:
        return Fail(message)
    return Retry(message)
