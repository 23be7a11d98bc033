"""The jobs worker: builds, starts, supervises and stops its parts.

What the engine promises and why: docs/explanation/design.md, "The jobs engine" (and
"Rooms inside the parts" for this split).

One `Worker` per process, made of three parts and the loops around them:

* `jobs.producer.Producer` (`jobrelay-worker-claim`): claims jobs into the free slots of
  each concurrency class (plus prefetch) on a claim connection of its own, holds the
  backlog and starts a run per job as slots free.
* `jobs.executor.Executor`: one run of one job, from its payload to its recorded outcome
  (timeout, exception classification, retry decision, fenced writes).
* `jobs.completer.Completer` (`jobrelay-worker-flush`): records plain completions many per
  durable commit, with the bounded flush window (`hold_slot_until_recorded`).
* `jobs.counters.WorkerCounters`: every event the parts count, into `stats` and `metrics`
  at once (built here, shared by the three parts).
* `LeaseKeeper`: one batched heartbeat statement every lease/3 for every job the producer
  holds; a job the database no longer gives to this worker has its handler cancelled.
* `jobrelay-jobs-listener`: `db.listen.NotifyListener` on `jobrelay_jobs`; wakes the
  producer on each notification and after each reconnect.
* `jobrelay-worker-presence`: a `Periodic` upserting this worker's `worker_heartbeat` row
  (id, slots per class, global caps) every lease/3 (`jobs.presence`); the row is deleted
  when the worker stops claiming on a clean stop. Diagnoses read it ("no worker serves
  this class").
* `LeaseRescuer`, `ParentReconciler`, `StepReconciler`, `Pruner`, the declared sweeps: see
  `maintenance.py`.
* `ScheduleTicker` (when schedules are declared): see `ticker.py`.

Every loop has the one shape of `jobrelay.loops` (validated keyword-only construction,
`start`/`stop`, named tasks, log-and-continue with a capped backoff, one log line when a
loop starts failing and one when it recovers).

Shutdown (`stop()`, SIGTERM/SIGINT in `jobrelay worker`): stop claiming, forget this
worker's presence, release the backlog, let running jobs finish for `shutdown_grace_s`,
then cancel the rest and release their claims (pending at once, attempt undone, workers
notified) so another worker takes them without waiting for the lease; record every
completion; stop the loops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
from collections.abc import Callable

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.listen import NotifyListener
from jobrelay.db.pool import Connection
from jobrelay.domain.jobs_config import DEFAULT_CLASS, QueueLimits
from jobrelay.jobs import presence
from jobrelay.jobs.completer import Completer
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.enqueue import DEFAULT_PAYLOAD_LIMIT_BYTES, Enqueuer
from jobrelay.jobs.executor import Executor
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.maintenance import (
    LISTEN_JOBS,
    LeaseKeeper,
    LeaseRescuer,
    ParentReconciler,
    Pruner,
    StepReconciler,
    UnservedSweeper,
)
from jobrelay.jobs.metrics import WorkerMetrics
from jobrelay.jobs.producer import Producer
from jobrelay.jobs.registry import Registry
from jobrelay.jobs.retention import Retention
from jobrelay.jobs.ticker import ScheduleTicker
from jobrelay.jobs.worker_config import WorkerConfig, WorkerStats, default_worker_id
from jobrelay.loops import Loop, Periodic

__all__ = ["Worker", "WorkerConfig", "WorkerStats", "default_worker_id"]

log = logging.getLogger("jobrelay.jobs.worker")
_FORGET_TIMEOUT_S = 2.0  # deleting the heartbeat row on stop; a stale row is harmless


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
        self.config = config
        self.metrics = metrics or WorkerMetrics()
        self.metrics_port: int | None = None
        self.stats = WorkerStats()
        self.counters = WorkerCounters(self.stats, self.metrics)
        self._started = False
        # Handlers create jobs (children) through the same validated enqueue as the API.
        enqueuer = enqueuer or Enqueuer(
            registry, payload_limit_bytes=DEFAULT_PAYLOAD_LIMIT_BYTES, failpoints=failpoints
        )
        self.completer = Completer(
            pool=pool,
            config=config,
            freed=self._freed,
            failpoints=failpoints,
            counters=self.counters,
        )
        self.executor = Executor(
            pool=pool,
            registry=registry,
            enqueuer=enqueuer,
            completer=self.completer,
            config=config,
            freed=self._freed,
            jitter=jitter,
            failpoints=failpoints,
            counters=self.counters,
        )
        # What every claim of this worker obeys, resolved once for its life.
        limits = QueueLimits(
            lease_s=config.lease_s,
            total=config.total_slots,
            slots=config.class_slots,
            caps=config.global_caps,
            rates={**registry.rates, **config.rates},
            fair=config.fair_claims,
            types=registry.names,
        )
        self._job_types = registry.names
        self.producer = Producer(
            pool=pool,
            config=config,
            limits=limits,
            executor=self.executor,
            counters=self.counters,
        )
        self.keeper = LeaseKeeper(
            pool=pool,
            lease_s=config.lease_s,
            # Deferred completions keep their leases too: their rows are locked elsewhere.
            held=lambda: [*self.producer.held(), *self.completer.deferred_jobs()],
            lost=self.producer.lease_lost,
            busy=self._heartbeats_busy,
        )
        conninfo = config.listen_conninfo or (
            pool.conninfo if isinstance(pool.conninfo, str) else ""
        )
        self._listen = config.listen and bool(conninfo)
        self.listener = NotifyListener(
            conninfo=conninfo,
            listen=[LISTEN_JOBS],
            notified=self.producer.more_work,
            noticed=self.producer.noticed,
            name="jobs-listener",
        )
        self.rescuer = LeaseRescuer(pool=pool, interval_s=config.rescue_interval_s)
        self.reconciler = ParentReconciler(pool=pool, interval_s=config.reconcile_interval_s)
        self.step_reconciler = StepReconciler(
            pool=pool,
            interval_s=config.reconcile_interval_s,
            retention_s=config.workflow_retention_s,
        )
        # Checked a few times within the grace, at most every minute (a skip scan per type).
        self.unserved = UnservedSweeper(
            pool=pool,
            interval_s=min(60.0, config.unserved_fail_after_s / 4),
            after_s=config.unserved_fail_after_s,
        )
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
                enqueuer=enqueuer,
                grace_s=config.schedule_grace_s,
            )
        self.presence = Periodic(
            name="worker-presence", interval_s=config.heartbeat_interval_s, run=self._announce
        )
        self.pruner = Pruner(
            pool=pool,
            interval_s=config.prune_interval_s,
            retention=Retention(config.retention_s, config.retention_by_type),
            log_threshold=config.prune_log_threshold,
        )

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def claim_idle(self) -> bool:
        """True while the claim loop waits for work (a notification, a free slot, a poll)."""
        return self.producer.idle

    def _freed(self) -> None:
        # A write freed a source or a capped slot in the database: worth a claim again.
        self.producer.more_work()

    def _heartbeats_busy(self, count: int) -> None:
        # Rows another transaction locked: their leases were not extended this round.
        self.counters.deferred("heartbeat", count)

    def _loops(self) -> list[Loop]:
        loops: list[Loop] = [
            self.presence,
            self.keeper,
            self.rescuer,
            self.reconciler,
            self.step_reconciler,
            self.unserved,
            *self.sweeps,
        ]
        if self._listen:
            loops.append(self.listener)
        loops.append(self.pruner)
        if self.ticker is not None:
            loops.append(self.ticker)
        return loops

    async def start(self) -> None:
        """Start the loops, then claiming and recording."""
        if self._started:
            raise RuntimeError("worker already started")
        if self.config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.config.metrics_port)
        for loop in self._loops():
            await loop.start()
        await self.producer.start()
        self.completer.start()
        self._started = True  # stop() undoes a complete start only, as it always did
        log.info(
            "worker %s started (slots %s, global caps %s)",
            self.worker_id,
            self.config.class_slots,
            self.config.global_caps or "none",
        )

    async def stop(self) -> None:
        """Stop claiming, let running jobs finish for `shutdown_grace_s`, release the rest,
        record every completion, then stop the loops."""
        if not self._started:
            return
        await self.producer.stop()
        await self._forget()  # claims no more: no longer serves its classes
        await self.producer.release_backlog()
        await self.producer.finish(self.config.shutdown_grace_s)
        await self.completer.stop()
        for loop in reversed(self._loops()):
            await loop.stop()
        self.metrics.close()
        self._started = False
        log.info("worker %s stopped: %s", self.worker_id, self.stats)

    async def run_until(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set, then stop (the CLI sets it on SIGTERM/SIGINT)."""
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
                job_types=self._job_types,
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
