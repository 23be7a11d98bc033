"""Background loops of the jobs worker, all of one shape (STYLE.md #9).

Each loop is built with validated keyword-only arguments (a bad value raises `ValueError`
naming it), runs as one named task between `start()` and `stop()`, does its work in
`run_once()` (which tests may also call directly), and logs and continues when an
iteration fails. `signals` counts iterations, errors and rows acted on, so tests poll
events instead of sleeping (as River's `TestSignals`).

* `LeaseKeeper`: ONE batched heartbeat statement per worker every lease/3 for all its
  running jobs; a job missing from the answer lost its lease and its handler is cancelled.
* `LeaseRescuer`: expired leases back to pending (or failed `lease_expired`).
* `ParentReconciler`: ends waiting parents whose children are all terminal (a repair: the
  last child's transaction normally does it).
* `Pruner`: deletes finished jobs older than the retention (children with their parent).
* `SweepLoop`: runs one sweep a part declared (`JobTypes.sweep`), e.g. failing Code2WF
  generations whose dispatch job ended without dispatching.
* `NotifyListener`: a dedicated connection LISTENing for enqueue wake-ups; reconnects with
  backoff, and the worker keeps polling meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.jobs import claims
from jobrelay.jobs.models import ClaimedJob

log = logging.getLogger("jobrelay.jobs.maintenance")
_QUERIES = Queries("jobrelay.jobs")


@dataclass
class LoopSignals:
    """What a loop did so far; tests poll these."""

    runs: int = 0
    errors: int = 0
    acted: int = 0  # rows acted on (rescued, reconciled, pruned, lost, notifications)


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


class Loop:
    """The shape every background loop shares; subclasses implement `run_once`."""

    name = "loop"

    def __init__(self, *, interval_s: float) -> None:
        self.interval_s = _positive("interval_s", interval_s)
        self.signals = LoopSignals()
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> int:
        """One iteration; returns how many rows (or events) it acted on."""
        raise NotImplementedError

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"{self.name} already started")
        self._task = asyncio.create_task(self._run(), name=f"jobrelay-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            try:
                acted = await self.run_once()
            except Exception:
                self.signals.errors += 1
                log.exception("%s failed; retrying in %.2fs", self.name, self.interval_s)
            else:
                self.signals.acted += acted
            self.signals.runs += 1
            await asyncio.sleep(self.interval_s)


class LeaseRescuer(Loop):
    name = "lease-rescuer"

    def __init__(
        self, *, pool: AsyncConnectionPool[Connection], interval_s: float, limit: int = 1000
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._pool = pool
        self._limit = int(_positive("limit", limit))

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            rescued = await claims.rescue_expired(conn, limit=self._limit)
        if rescued:
            log.info("rescued %d jobs with expired leases", len(rescued))
        return len(rescued)


class ParentReconciler(Loop):
    name = "parent-reconciler"

    def __init__(
        self, *, pool: AsyncConnectionPool[Connection], interval_s: float, limit: int = 500
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._pool = pool
        self._limit = int(_positive("limit", limit))

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            ended = await claims.reconcile_stale_parents(conn, limit=self._limit)
        if ended:
            log.warning("reconciler ended %d parents left behind: %s", len(ended), ended)
        return len(ended)


class SweepLoop(Loop):
    """Runs a declared sweep every `interval_s`; its name is the sweep's."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        name: str,
        interval_s: float,
        run: Callable[[AsyncConnectionPool[Connection]], Awaitable[int]],
    ) -> None:
        super().__init__(interval_s=interval_s)
        self.name = f"sweep-{name}"
        self._pool = pool
        self._run_sweep = run

    async def run_once(self) -> int:
        acted = await self._run_sweep(self._pool)
        if acted:
            log.info("%s acted on %d rows", self.name, acted)
        return acted


class Pruner(Loop):
    name = "pruner"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        interval_s: float,
        retention_s: float,
        limit: int = 1000,
        log_threshold: int = 1000,
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._pool = pool
        self.retention_s = _positive("retention_s", retention_s)
        self._limit = int(_positive("limit", limit))
        if log_threshold < 0:
            raise ValueError(f"log_threshold must be >= 0, got {log_threshold!r}")
        self.log_threshold = log_threshold

    async def run_once(self) -> int:
        total = 0
        while True:  # batches until nothing old is left
            async with self._pool.connection() as conn:
                pruned = await claims.prune_finished(
                    conn, retention_s=self.retention_s, limit=self._limit
                )
            total += pruned
            if pruned < self._limit:
                break
        # A big pass (e.g. the first worker on a table with years of history) is a warning,
        # so an operator sees the count even at the default log level.
        if total > self.log_threshold:
            log.warning(
                "pruned %d finished jobs older than %.0fs in one pass "
                "(more than JOBRELAY_JOBS_PRUNE_LOG_THRESHOLD=%d)",
                total,
                self.retention_s,
                self.log_threshold,
            )
        elif total:
            log.info("pruned %d finished jobs older than %.0fs", total, self.retention_s)
        return total


class LeaseKeeper(Loop):
    """Heartbeats: `held()` gives the jobs whose handlers run now; `lost(job)` is called
    for each one whose claim the database no longer gives to this worker."""

    name = "lease-keeper"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        lease_s: float,
        held: Callable[[], Sequence[ClaimedJob]],
        lost: Callable[[ClaimedJob], None],
    ) -> None:
        self.lease_s = _positive("lease_s", lease_s)
        super().__init__(interval_s=lease_s / 3)
        self._pool = pool
        self._held = held
        self._lost = lost

    async def _run(self) -> None:
        await asyncio.sleep(self.interval_s)  # a fresh claim carries a full lease
        await super()._run()

    async def run_once(self) -> int:
        jobs = list(self._held())
        if not jobs:
            return 0
        async with self._pool.connection() as conn:
            kept = await claims.heartbeat_many(conn, jobs, lease_s=self.lease_s)
        gone = [job for job in jobs if job.claim_token not in kept]
        for job in gone:
            self._lost(job)
        return len(gone)


class NotifyListener(Loop):
    """LISTEN on a dedicated connection; `notified()` runs on each wake-up and once after
    every (re)connect, so a notification missed while disconnected costs one claim."""

    name = "notify-listener"

    def __init__(self, *, conninfo: str, notified: Callable[[], None], retry_s: float) -> None:
        super().__init__(interval_s=retry_s)
        self._conninfo = conninfo
        self._notified = notified
        self.connected = False
        self.backend_pid: int | None = None

    async def run_once(self) -> int:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        async with conn:
            await conn.execute(_QUERIES.listen_jobs)
            self.connected = True
            self.backend_pid = conn.info.backend_pid
            log.debug("listening for job notifications (backend %s)", self.backend_pid)
            try:
                self._notified()
                async for _ in conn.notifies():
                    self.signals.acted += 1
                    self._notified()
            finally:
                self.connected = False
        return 0
