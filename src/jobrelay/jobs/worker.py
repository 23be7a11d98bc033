"""The jobs worker: claim, run, heartbeat, settle, shut down (DESIGN.md section 3).

One `Worker` per process. Its loops share one shape (`jobrelay.loops`: validated
keyword-only construction, `start`/`stop`, named tasks, log-and-continue with a capped
backoff, one log line when a loop starts failing and one when it recovers). The claim and
flush loops are hot paths: they keep their own `while` and use the same `Backoff` and
`Health` rather than the `Loop` class, whose fixed rest between iterations they cannot have.

* `jobrelay-worker-claim`: claims, per concurrency class, as many jobs as that class has
  free slots (one `claim_jobs` statement on a connection that runs only claims, whose
  commits do not wait for the WAL flush; global caps and per-source serialization are
  enforced there), runs each job in its own task and waits until a slot of a class that may
  have more work frees, a notification arrives (LISTEN/NOTIFY on enqueue) or the poll
  interval passes.
* `jobrelay-worker-flush`: records finished jobs on its own connection, many per durable
  commit (one batched `complete_jobs` statement, parents reconciled in the same
  transaction). A batch commits while the next one accumulates, so the claim loop never
  waits for a durable commit. When more than 4 completions per slot wait for it, a finished
  job keeps its slot until its completion is recorded (`hold_slot_until_recorded`, at most
  one lease), which bounds the finished handlers a SIGKILL can make run again to 5 x slots.
* `LeaseKeeper`: one batched heartbeat statement every lease/3 for all running jobs; a job
  the database no longer gives to this worker has its handler cancelled (`LeaseLost`).
* `jobrelay-jobs-listener`: `db.listen.NotifyListener` on `jobrelay_jobs`; wakes the claim
  loop on each notification and after each reconnect.
* `jobrelay-worker-presence`: a `Periodic` upserting this worker's `worker_heartbeat` row
  (id, slots per class, global caps) every lease/3 (`jobs.presence`); the row is deleted
  when the worker stops claiming on a clean stop. Diagnoses read it ("no worker serves
  this class").
* `LeaseRescuer`, `ParentReconciler`, `Pruner`, the declared sweeps: see `maintenance.py`.
* `ScheduleTicker` (when schedules are declared): see `ticker.py`.

Shutdown (`stop()`, SIGTERM/SIGINT in `jobrelay worker`): stop claiming, let running jobs
finish for `shutdown_grace_s`, then cancel the rest and release their claims (pending at
once, attempt undone, workers notified) so another worker takes them without waiting for
the lease; record every completion; stop the loops.

An unexpected exception from a handler is classified (`domain.retry.classify`: retryable
unless it is a known permanent kind), recorded with its message in `last_error`, and the
worker keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import Complete, Fail, FailureKind, LeaseLost, Outcome, Retry
from jobrelay.domain.jobs_config import (
    DEFAULT_CLASS,
    ConfigError,
    QueueLimits,
    Rate,
    check_class_name,
)
from jobrelay.domain.retry import ErrorClass, GiveUp, RetryAfter, RetryPolicy, classify
from jobrelay.jobs import claims, presence
from jobrelay.jobs.claims import Completion, Done
from jobrelay.jobs.enqueue import DEFAULT_PAYLOAD_LIMIT_BYTES, Enqueuer
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.maintenance import (
    LISTEN_JOBS,
    LeaseKeeper,
    LeaseRescuer,
    ParentReconciler,
    Pruner,
)
from jobrelay.jobs.metrics import WorkerMetrics
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.registry import JobContext, JobType, Registry
from jobrelay.jobs.ticker import DEFAULT_GRACE_S, ScheduleTicker
from jobrelay.loops import Backoff, Health, Loop, Periodic, retry

log = logging.getLogger("jobrelay.jobs.worker")
T = TypeVar("T")
_DEFAULT_POLICY = RetryPolicy()
# The bounded flush window (hold_slot_until_recorded): unrecorded completions per slot
# beyond which a finished job waits for the flush; a fast drain of short jobs stays below it.
_FLUSH_WINDOW = 4
_FLUSH_MAX = 1000
# After failures in a row the claim loop waits 0.2 s, 0.4 s, ... up to 5 s (a listener that
# reconnects wakes it sooner); the flush loop 0.1 s up to 2 s, since finished jobs wait on it;
# recording one outcome retries from 50 ms up to 2 s while the database is unreachable.
_CLAIM_BACKOFF = Backoff(base_s=0.2, cap_s=1.0)
_FLUSH_BACKOFF = Backoff(base_s=0.1, cap_s=2.0)
_DB_BACKOFF = Backoff(base_s=0.05, cap_s=2.0)
_DEFAULT_CONCURRENCY = 10
_FORGET_TIMEOUT_S = 2.0  # deleting the heartbeat row on stop; a stale row is harmless


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs jobs. Invalid values raise `ValueError` naming them.

    `slots`: jobs run at once per concurrency class; a class without slots is not claimed.
    Without `slots`, every class of `known_classes` shares `concurrency` slots.
    `concurrency`: the total over all classes (default: the sum of `slots`, else 10).
    `global_caps`: at most that many running jobs of a class across ALL workers (every
    worker must use the same caps).
    `prefetch`: jobs claimed ahead of free slots (held, heartbeated, started as slots free).
    `schedule_grace_s`: a schedule's tick due for longer than this when a ticker reaches it
    was missed (its catch-up policy applies); a younger one gets its own job.
    `retention_s`: finished jobs older than this are pruned (None: never).
    `prune_log_threshold`: a prune pass deleting more rows than this logs a warning.
    `listen_conninfo`: the session connection the listener uses (default: the pool's); a
    transaction pooler cannot LISTEN, so it takes a direct one.
    `claim_session_settings`: False when the pool goes through a transaction pooler, where
    session settings would leak to other clients' server connections (claims then commit
    synchronously, like every other write).
    `rates`: rate limits per class on top of those the registry declares (every worker must
    use the same). `fair_claims`: rotate claims across fairness keys (False: strict priority
    and arrival order, the claim before issue 17).
    `hold_slot_until_recorded`: a bounded flush window. When the completions not yet
    recorded (buffered or being committed) exceed 4 per slot of the worker, a finished job
    keeps its slot until the flush has recorded its completion (at most one lease), so a
    killed worker loses at most 5 x slots finished-but-unrecorded completions, whose
    handlers then run again elsewhere; while the flush keeps up nothing waits. False never
    waits: completions then pile up in the flush without bound while the database is slow
    (bench/chaos measures both).
    """

    concurrency: int | None = None
    slots: Mapping[str, int] | None = None
    known_classes: Sequence[str] = (DEFAULT_CLASS,)
    global_caps: Mapping[str, int] = field(default_factory=dict)
    lease_s: float = 30.0
    poll_interval_s: float = 0.25
    rescue_interval_s: float = 5.0
    reconcile_interval_s: float = 10.0
    prune_interval_s: float = 300.0
    retention_s: float | None = 7 * 24 * 3600.0
    prune_log_threshold: int = 1000
    shutdown_grace_s: float = 10.0
    prefetch: int = 0
    listen: bool = True
    listen_conninfo: str | None = None
    claim_session_settings: bool = True
    rates: Mapping[str, Rate] = field(default_factory=dict)
    fair_claims: bool = True
    hold_slot_until_recorded: bool = True
    metrics_port: int | None = None
    worker_id: str = field(default_factory=default_worker_id)
    schedule_grace_s: float = DEFAULT_GRACE_S
    shared: bool = field(init=False, default=False)  # built from `concurrency` alone

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared", self.slots is None)
        slots = dict(self.slots) if self.slots is not None else None
        for name, count in (slots or {}).items():
            _check_class("slots", name)
            if count < 0:
                raise ValueError(f"slots: {name}={count} must be >= 0")
        if slots is not None and not any(slots.values()):
            raise ValueError(f"slots: at least one class needs a slot, got {slots}")
        concurrency = self.concurrency
        if concurrency is None:
            concurrency = sum(slots.values()) if slots else _DEFAULT_CONCURRENCY
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if slots is None:
            slots = dict.fromkeys(self.known_classes, concurrency)
        object.__setattr__(self, "concurrency", concurrency)
        object.__setattr__(self, "slots", {c: n for c, n in slots.items() if n > 0})
        for name, cap in self.global_caps.items():
            _check_class("global_caps", name)
            if cap < 1:
                raise ValueError(f"global_caps: {name}={cap} must be >= 1")
        object.__setattr__(self, "global_caps", dict(self.global_caps))
        for name in (
            "lease_s",
            "poll_interval_s",
            "rescue_interval_s",
            "reconcile_interval_s",
            "prune_interval_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.retention_s is not None and not self.retention_s > 0:
            raise ValueError(f"retention_s must be > 0 or None, got {self.retention_s}")
        if self.shutdown_grace_s < 0:
            raise ValueError(f"shutdown_grace_s must be >= 0, got {self.shutdown_grace_s}")
        if not self.schedule_grace_s > 0:
            raise ValueError(f"schedule_grace_s must be > 0, got {self.schedule_grace_s}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in 0..65535, got {self.metrics_port}")

    @property
    def class_slots(self) -> dict[str, int]:
        assert self.slots is not None  # set by __post_init__
        return dict(self.slots)

    @property
    def total_slots(self) -> int:
        assert self.concurrency is not None  # set by __post_init__
        return self.concurrency

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(self.class_slots))

    @property
    def heartbeat_interval_s(self) -> float:
        return self.lease_s / 3


def _check_class(what: str, name: str) -> None:
    try:
        check_class_name(name)
    except ConfigError as exc:
        raise ValueError(f"{what}: {exc}") from None


@dataclass
class WorkerStats:
    """Counters for tests and logs; tests poll these (or the database), never sleep."""

    claims: int = 0  # claim statements run
    claimed: int = 0  # jobs they claimed
    completed: int = 0
    requeued: int = 0
    retried: int = 0
    failed: int = 0
    lease_lost: int = 0
    released: int = 0
    errors: int = 0
    claim_races: int = 0
    parents_ended: int = 0


@dataclass(slots=True)
class _Run:
    job: ClaimedJob
    task: asyncio.Task[None] | None = None
    started: bool = False
    settling: bool = False
    lost: bool = False


class Worker:
    """Runs claimed jobs of the registry's types. `await start()`, later `await stop()`."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        registry: Registry,
        config: WorkerConfig,
        jitter: Callable[[], float] = random.random,
        failpoints: Failpoints = NO_FAILPOINTS,
        metrics: WorkerMetrics | None = None,
        enqueuer: Enqueuer | None = None,
    ) -> None:
        if config.shared:  # every class the registry knows shares the slots
            known = {DEFAULT_CLASS, *registry.classes, *(t.concurrency_class for t in registry)}
            config = dataclasses.replace(config, slots=None, known_classes=tuple(sorted(known)))
        self._pool = pool
        self._registry = registry
        # Handlers create jobs (children) through the same validated enqueue as the API.
        self._enqueuer = enqueuer or Enqueuer(
            registry, payload_limit_bytes=DEFAULT_PAYLOAD_LIMIT_BYTES, failpoints=failpoints
        )
        self.config = config
        # What every claim of this worker obeys, resolved once for its life.
        self._limits = QueueLimits(
            lease_s=config.lease_s,
            total=config.total_slots,
            slots=config.class_slots,
            caps=config.global_caps,
            rates={**registry.rates, **config.rates},
            fair=config.fair_claims,
        )
        self._jitter = jitter
        self._failpoints = failpoints
        self.metrics = metrics or WorkerMetrics()
        self.metrics_port: int | None = None
        self.stats = WorkerStats()
        # Runs by claim token, not job id: a job retried at once can be claimed again by
        # this worker while the run that retried it is still returning its connection.
        self._runs: dict[uuid.UUID, _Run] = {}
        self._busy: Counter[str] = Counter()  # slots taken per class (running + held)
        self._backlog: list[ClaimedJob] = []  # claimed ahead (prefetch), not started
        self._wake = asyncio.Event()  # there may be work to claim, or stop requested
        # Classes whose last claim got every job it asked for: more may be waiting, so a
        # slot of theirs freeing is worth a claim. A class whose claim came back short waits
        # for a notification (or the poll) instead of claiming again at every job's end.
        self._hungry: set[str] = set(config.class_slots)
        self._stop_requested = asyncio.Event()
        self._flush_needed = asyncio.Event()
        self._done: list[Done] = []
        # Runs waiting for their buffered completion to be recorded, by claim token.
        self._recorded: dict[uuid.UUID, asyncio.Future[None]] = {}
        self._flushing = 0  # completions in the batch the flush loop is committing
        self._closing = False
        self._claim_idle = False
        self._tasks: list[asyncio.Task[None]] = []
        self.keeper = LeaseKeeper(
            pool=pool, lease_s=config.lease_s, held=self._held, lost=self._lease_lost
        )
        # Claims run on a connection of their own, set up for claims only (no durable
        # commit to wait for, one generic plan); everything else uses the shared pool.
        self._claim_pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            pool.conninfo,
            connection_class=pool.connection_class,
            kwargs=pool.kwargs,
            min_size=1,
            max_size=1,
            timeout=pool.timeout,
            configure=claims.configure_claim_session if config.claim_session_settings else None,
            open=False,
            name=f"{pool.name}-claims",
        )
        conninfo = config.listen_conninfo or (
            pool.conninfo if isinstance(pool.conninfo, str) else ""
        )
        self._listen = config.listen and bool(conninfo)
        self.listener = NotifyListener(
            conninfo=conninfo, listen=[LISTEN_JOBS], notified=self._more_work, name="jobs-listener"
        )
        self.rescuer = LeaseRescuer(pool=pool, interval_s=config.rescue_interval_s)
        self.reconciler = ParentReconciler(pool=pool, interval_s=config.reconcile_interval_s)
        self.sweeps = [
            Periodic(
                name=f"sweep-{sweep.name}",
                interval_s=sweep.every_s,
                run=functools.partial(sweep.run, pool),
            )
            for sweep in registry.sweeps
        ]
        # The declared schedules: every worker ticks them, each tick enqueued once overall.
        self.ticker: ScheduleTicker | None = None
        if registry.schedules:
            self.ticker = ScheduleTicker(
                pool=pool,
                schedules=registry.schedules,
                enqueuer=self._enqueuer,
                grace_s=config.schedule_grace_s,
            )
        self.presence = Periodic(
            name="worker-presence", interval_s=config.heartbeat_interval_s, run=self._announce
        )
        self.pruner: Pruner | None = None
        if config.retention_s is not None:
            self.pruner = Pruner(
                pool=pool,
                interval_s=config.prune_interval_s,
                retention_s=config.retention_s,
                log_threshold=config.prune_log_threshold,
            )

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def claim_idle(self) -> bool:
        """True while the claim loop waits for work (a notification, a free slot, a poll)."""
        return self._claim_idle

    def _loops(self) -> list[Loop]:
        loops: list[Loop] = [
            self.presence,
            self.keeper,
            self.rescuer,
            self.reconciler,
            *self.sweeps,
        ]
        if self._listen:
            loops.append(self.listener)
        if self.pruner is not None:
            loops.append(self.pruner)
        if self.ticker is not None:
            loops.append(self.ticker)
        return loops

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("worker already started")
        if self.config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.config.metrics_port)
        for loop in self._loops():
            await loop.start()
        await self._claim_pool.open(wait=False)
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="jobrelay-worker-claim"),
            asyncio.create_task(self._flush_loop(), name="jobrelay-worker-flush"),
        ]
        log.info(
            "worker %s started (slots %s, global caps %s)",
            self.worker_id,
            self.config.class_slots,
            self.config.global_caps or "none",
        )

    async def stop(self) -> None:
        """Stop claiming, let running jobs finish for `shutdown_grace_s`, release the rest,
        record every completion, then stop the loops."""
        if not self._tasks:
            return
        self._stop_requested.set()
        self._wake.set()
        claim_task, flush_task = self._tasks
        await asyncio.gather(claim_task, return_exceptions=True)
        await self._claim_pool.close()
        await self._forget()  # claims no more: no longer serves its classes
        await self._release_backlog()
        running = [run.task for run in self._runs.values() if run.task is not None]
        if running:
            _, late = await asyncio.wait(running, timeout=self.config.shutdown_grace_s)
            for run in list(self._runs.values()):
                if run.task in late and not run.settling:
                    run.task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._closing = True
        self._flush_needed.set()
        await asyncio.gather(flush_task, return_exceptions=True)
        for loop in reversed(self._loops()):
            await loop.stop()
        self.metrics.close()
        self._tasks = []
        log.info("worker %s stopped: %s", self.worker_id, self.stats)

    async def run_until(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    # -- presence --------------------------------------------------------------------

    async def _announce(self) -> int:
        async with self._pool.connection() as conn:
            await presence.announce(
                conn,
                worker_id=self.worker_id,
                class_slots=self.config.class_slots,
                global_caps=self.config.global_caps,
                interval_s=self.config.heartbeat_interval_s,
            )
        return 0

    async def _forget(self) -> None:
        """Stop announcing and delete this worker's heartbeat row; when the database is
        unreachable the row is left to go stale (a stop waits at most 2 s for it)."""
        await self.presence.stop()
        try:
            async with asyncio.timeout(_FORGET_TIMEOUT_S), self._pool.connection() as conn:
                await presence.forget(conn, worker_id=self.worker_id)
        except Exception:
            log.warning("could not delete worker %s's heartbeat row", self.worker_id, exc_info=True)

    # -- claim loop --------------------------------------------------------------------

    def _free(self) -> tuple[dict[str, int], int]:
        """Free slots per class and in all, plus what may be claimed ahead (prefetch)."""
        ahead = self.config.prefetch - len(self._backlog)
        total = self.config.total_slots - sum(self._busy.values()) + max(ahead, 0)
        limits = {
            c: n - self._busy[c] + max(ahead, 0)
            for c, n in self.config.class_slots.items()
            if n - self._busy[c] + max(ahead, 0) > 0
        }
        return limits, min(total, sum(limits.values()))

    async def _claim_once(self, limits: dict[str, int], total: int) -> list[ClaimedJob]:
        """Claim up to the free slots with one statement on the claim connection, whose
        commits do not wait for the WAL flush (`claims.configure_claim_session`): a claim
        never waits behind a durable commit; the flush loop records completions meanwhile."""
        started = time.perf_counter()
        async with self._claim_pool.connection() as conn:
            jobs = await claims.claim(
                conn, self._limits, worker_id=self.worker_id, wanted=limits, total=total
            )
        self.metrics.claim_latency.observe(time.perf_counter() - started)
        return jobs

    async def _claim_loop(self) -> None:
        health = Health("worker-claim", backoff=_CLAIM_BACKOFF)
        while not self._stop_requested.is_set():
            limits, total = self._free()
            if total <= 0:
                self._wake.clear()
                if self._free()[1] <= 0 and not self._stop_requested.is_set():
                    await self._pause(self.config.poll_interval_s)
                continue
            self._wake.clear()
            try:
                jobs = await self._claim_once(limits, total)
            except Exception as exc:
                if claims.is_claim_race(exc):
                    # Another claimer committed a job of the same source (or slot) after
                    # this statement's snapshot; the unique index refused ours. Retry.
                    self.stats.claim_races += 1
                    log.debug("claim lost a race on %s; retrying", exc)
                    await asyncio.sleep(0)
                    continue
                self.stats.errors += 1
                await self._pause(health.failed(exc))
                continue
            health.ok()
            self.stats.claims += 1
            self.stats.claimed += len(jobs)
            got = Counter(job.concurrency_class for job in jobs)
            for cls, asked in limits.items():
                if got[cls] >= asked:
                    self._hungry.add(cls)
                else:
                    self._hungry.discard(cls)
            for job in jobs:
                self.metrics.claimed.labels(job.type).inc()
                self._busy[job.concurrency_class] += 1
                self._backlog.append(job)
            self._start_backlog()
            if len(jobs) < total:
                await self._pause(self.config.poll_interval_s)

    def _more_work(self) -> None:
        """New work may be claimable (a notification, or a source or capped slot freed by
        this worker): every class is worth a claim again."""
        self._hungry.update(self.config.class_slots)
        self._wake.set()

    async def _pause(self, timeout_s: float) -> None:
        """Wait `timeout_s`, or less when there may be work to claim (a slot of a hungry
        class frees, `_more_work`) or stop is requested."""
        self._claim_idle = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_s)
        finally:
            self._claim_idle = False

    def _start_backlog(self) -> None:
        """Start held jobs while their class has a running slot free."""
        running: Counter[str] = Counter(
            r.job.concurrency_class for r in self._runs.values() if r.started
        )
        slots = self.config.class_slots
        waiting: list[ClaimedJob] = []
        total_running = sum(running.values())
        for job in self._backlog:
            cls = job.concurrency_class
            if running[cls] < slots.get(cls, 0) and total_running < self.config.total_slots:
                running[cls] += 1
                total_running += 1
                self._spawn(job)
            else:
                waiting.append(job)
        self._backlog = waiting
        for job in waiting:  # held jobs are heartbeated too
            self._runs.setdefault(job.claim_token, _Run(job))

    async def _release_backlog(self) -> None:
        backlog, self._backlog = self._backlog, []
        for job in backlog:
            await self._release(job)
            self._runs.pop(job.claim_token, None)
            self._busy[job.concurrency_class] -= 1

    def _spawn(self, job: ClaimedJob) -> None:
        run = self._runs.get(job.claim_token) or _Run(job)
        run.started = True
        run.task = asyncio.create_task(self._process(run), name=f"job:{job.type}:{job.id}")
        self._runs[job.claim_token] = run
        self.metrics.running.labels(job.concurrency_class).inc()
        run.task.add_done_callback(lambda _: self._finished(run))

    def _finished(self, run: _Run) -> None:
        if self._runs.pop(run.job.claim_token, None) is not None:
            self._busy[run.job.concurrency_class] -= 1
            self.metrics.running.labels(run.job.concurrency_class).dec()
        if self._backlog and not self._stop_requested.is_set():
            self._start_backlog()
        if run.job.concurrency_class in self._hungry:
            self._wake.set()

    # -- leases ------------------------------------------------------------------------

    def _held(self) -> list[ClaimedJob]:
        return [r.job for r in self._runs.values() if not r.settling and not r.lost]

    def _lease_lost(self, job: ClaimedJob) -> None:
        run = self._runs.get(job.claim_token)
        if run is None or run.settling or run.lost:
            return  # finished meanwhile: its own write decides
        run.lost = True
        log.warning("job %s: lease lost, stopping its handler", job.id)
        if run.task is not None:
            run.task.cancel()
        else:  # held, not started: just forget it
            self._backlog = [j for j in self._backlog if j.claim_token != job.claim_token]
            self._runs.pop(job.claim_token, None)
            self._busy[run.job.concurrency_class] -= 1
            self.stats.lease_lost += 1
            self.metrics.lease_lost.inc()

    # -- one job -----------------------------------------------------------------------

    async def _process(self, run: _Run) -> None:
        job = run.job
        job_type = self._registry.get(job.type)
        if job_type is None:
            run.settling = True
            await self._settle(job, None, Fail(f"unknown job type {job.type!r}"))
            return
        try:
            payload = job_type.payload_model.model_validate({**job.payload, "type": job.type})
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            run.settling = True
            await self._settle(job, job_type, Fail(f"invalid payload: {details}"))
            return
        assert job_type.handler is not None  # the registry refuses entries without one
        started = time.perf_counter()
        context = JobContext(job, payload, self._pool, self._enqueuer.enqueue_many)
        deadline = asyncio.timeout(job_type.timeout_s)
        try:
            async with deadline:
                outcome: Outcome = await job_type.handler(context)
        except asyncio.CancelledError:
            if run.lost:
                self._count_lost()
                log.warning("job %s: lease lost, handler stopped, nothing written", job.id)
                return
            await self._release(job)
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                outcome = Retry(f"timed out after {job_type.timeout_s} s (the type's timeout)")
            else:
                outcome = _outcome_of(exc)
            log.warning("job %s (%s) raised: %r", job.id, job.type, exc, exc_info=True)
        finally:
            self.metrics.handler_duration.labels(job.type).observe(time.perf_counter() - started)
        run.settling = True
        if run.lost:
            self._count_lost()
            return
        await self._settle(job, job_type, outcome)

    def _count_lost(self) -> None:
        self.stats.lease_lost += 1
        self.metrics.lease_lost.inc()

    async def _release(self, job: ClaimedJob) -> None:
        try:
            async with self._pool.connection() as conn:
                await claims.release(conn, job)
            self.stats.released += 1
            self.metrics.released.inc()
        except Exception:
            log.warning("could not release job %s; its lease will expire", job.id, exc_info=True)

    async def _settle(
        self, job: ClaimedJob, job_type: JobType[Any] | None, outcome: Outcome
    ) -> None:
        """Record the outcome with a CAS write; never raises (the lease covers the rest)."""
        try:
            written = await self._record(job, job_type, outcome)
        except LeaseLost as exc:
            self._count_lost()
            log.warning("%s", exc)
        except Exception:
            self.stats.errors += 1
            log.exception("could not record the outcome of job %s; its lease will expire", job.id)
        else:
            if written and self._frees_claims(job):
                self._more_work()

    async def _record(
        self, job: ClaimedJob, job_type: JobType[Any] | None, outcome: Outcome
    ) -> bool:
        """Write the outcome now (True), or buffer a plain completion for the flush loop
        (False)."""
        if isinstance(outcome, Complete):
            if outcome.outputs is None:
                self._done.append(Done(job, outcome.result))
                self._flush_needed.set()
                if (
                    self.config.hold_slot_until_recorded
                    and len(self._done) + self._flushing > _FLUSH_WINDOW * self.config.total_slots
                ):
                    # The flush is behind by more than _FLUSH_WINDOW completions per slot:
                    # this slot waits for it, so a SIGKILL re-runs at most
                    # (_FLUSH_WINDOW + 1) x slots finished handlers. Waiting on every
                    # completion would cost a drain of short jobs a third of its rate.
                    await self._until_recorded(job)
                return False
            complete = outcome
            try:
                status = await self._with_db_retry(
                    lambda: claims.complete_fenced(
                        self._pool,
                        job,
                        result=complete.result,
                        outputs=complete.outputs,
                        failpoints=self._failpoints,
                    )
                )
            except (LeaseLost, psycopg.OperationalError):
                raise
            except Exception as exc:  # the outputs failed: rolled back, now a failed attempt
                log.warning("job %s: completing transaction failed: %s", job.id, exc)
                await self._record_failure(job, job_type, _outcome_of(exc))
            else:
                self._count(job, status)
            return True
        await self._record_failure(job, job_type, outcome)
        return True

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
        else:
            decision = GiveUp(FailureKind.PERMANENT)
        error = outcome.error
        if isinstance(decision, RetryAfter):
            await self._with_db(
                lambda conn: claims.retry_later(conn, job, delay_s=decision.delay_s, error=error)
            )
            self.stats.retried += 1
            self.metrics.retried.labels(job.type).inc()
        else:
            ended = await self._with_db(
                lambda conn: claims.fail(
                    conn, job, kind=decision.kind, error=error, failpoints=self._failpoints
                )
            )
            self.stats.failed += 1
            self.stats.parents_ended += len(ended)
            self.metrics.failed.labels(job.type).inc()

    def _count_settled(self, done: Sequence[Done], settled: claims.Settled) -> None:
        for d in done:
            self._count(d.job, settled.statuses[d.job.id])
        self.stats.parents_ended += len(settled.parents_ended)

    def _count(self, job: ClaimedJob, status: Completion) -> None:
        if status is Completion.COMPLETED:
            self.stats.completed += 1
            self.metrics.completed.labels(job.type).inc()
        elif status is Completion.REQUEUED:
            self.stats.requeued += 1
        else:
            self._count_lost()

    async def _with_db(self, action: Callable[[Connection], Awaitable[T]]) -> T:
        async def run() -> T:
            async with self._pool.connection() as conn:
                return await action(conn)

        return await self._with_db_retry(run)

    async def _with_db_retry(self, action: Callable[[], Awaitable[T]]) -> T:
        """Retry `action` while the database is unreachable, for at most one lease."""
        return await retry(
            action,
            what="recording a job's outcome",
            retry_on=_unreachable,
            backoff=_DB_BACKOFF,
            budget_s=self.config.lease_s,
        )

    # -- batched completions -----------------------------------------------------------

    async def _until_recorded(self, job: ClaimedJob) -> None:
        """Keep this job's slot until the flush recorded its completion, at most one lease
        (past it the lease has expired anyway; a stop never waits longer either)."""
        recorded = asyncio.get_running_loop().create_future()
        self._recorded[job.claim_token] = recorded
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(recorded), self.config.lease_s)
        finally:
            self._recorded.pop(job.claim_token, None)

    def _release_recorded(self, batch: Sequence[Done]) -> None:
        for d in batch:
            recorded = self._recorded.pop(d.job.claim_token, None)
            if recorded is not None and not recorded.done():
                recorded.set_result(None)

    async def _flush_loop(self) -> None:
        """Record finished jobs, durably, on a connection of their own: while one batch
        commits the next accumulates (group commit), and claims never wait for it."""
        health = Health("worker-flush", backoff=_FLUSH_BACKOFF)
        loop = asyncio.get_running_loop()
        give_up_at: float | None = None
        while True:
            await self._flush_needed.wait()
            self._flush_needed.clear()
            while self._done:
                batch, self._done = self._done[:_FLUSH_MAX], self._done[_FLUSH_MAX:]
                self._flushing = len(batch)
                try:
                    async with self._pool.connection() as conn:
                        settled = await claims.settle_many(conn, batch, failpoints=self._failpoints)
                except Exception as exc:
                    self._flushing = 0
                    self.stats.errors += 1
                    if self._closing and give_up_at is None:
                        give_up_at = loop.time() + self.config.lease_s
                    if give_up_at is not None and loop.time() > give_up_at:
                        log.error(
                            "could not record %d completions before stopping; their leases "
                            "will expire and the jobs run again",
                            len(batch) + len(self._done),
                            exc_info=True,
                        )
                        self._release_recorded([*batch, *self._done])
                        self._done = []
                        return
                    self._done[:0] = batch
                    await asyncio.sleep(health.failed(exc))
                    continue
                health.ok()
                self._flushing = 0
                self._release_recorded(batch)
                self._count_settled(batch, settled)
                if any(self._frees_claims(d.job) for d in batch):
                    self._more_work()  # a source or capped slot is free in the database now
            if self._closing:
                return

    def _frees_claims(self, job: ClaimedJob) -> bool:
        """Whether recording this job's end can make another job claimable: the next job
        of its source, or a slot of a globally capped class."""
        return job.source_key is not None or job.concurrency_class in self.config.global_caps


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError)


def _outcome_of(exc: BaseException) -> Retry | Fail:
    message = f"{type(exc).__name__}: {exc}"
    if classify(exc) is ErrorClass.PERMANENT:
        return Fail(message)
    return Retry(message)
