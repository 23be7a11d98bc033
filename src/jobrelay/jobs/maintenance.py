"""Background loops of the jobs worker, all of the one shape of `jobrelay.loops.Loop`.

Each loop is built with validated keyword-only arguments (a bad value raises `ValueError`
naming it), runs as one named task between `start()` and `stop()`, does its work in
`run_once()` (which tests may also call directly), and logs and continues when an
iteration fails (one line when it starts failing, one when it recovers). `signals` counts
iterations, errors and rows acted on, so tests poll events instead of sleeping.

* `LeaseKeeper`: ONE batched heartbeat statement per worker every lease/3 for all its
  running jobs (through a `jobs.buffer.Buffer`, as the completer's completions); a job
  missing from the answer lost its lease and its handler is cancelled; one whose row
  another transaction locks is `busy` (still held, lease not extended this time).
* `LeaseRescuer`: expired leases back to pending (or failed `lease_expired`).
* `ParentReconciler`: ends waiting parents whose children are all terminal (a repair: the
  last child's transaction normally does it).
* `StepReconciler`: releases held workflow steps whose dependencies all ended by a path
  that does not count endings (a repair, like the parent reconciler's).
* `UnservedSweeper`: fails pending jobs of a type no worker has served for a while.
* `Pruner`: applies the retention of finished jobs (`jobs.retention`: partitions created
  ahead, dropped when due; jobs finished in place moved out of `jobs`).
* The sweeps a part declared (`JobTypes.sweep`, e.g. failing Code2WF generations whose
  dispatch job ended without dispatching) each run as a `jobrelay.loops.Periodic`.
* The LISTEN connection for enqueue wake-ups is `jobrelay.db.listen.NotifyListener` on the
  `listen_jobs` statement (`LISTEN_JOBS`), the same loop the batch relay uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.jobs import claims, retention
from jobrelay.jobs.buffer import Buffer
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.retention import Retention, RetentionPass
from jobrelay.jobs.workflows import control, release
from jobrelay.loops import Loop, positive

log = logging.getLogger("jobrelay.jobs.maintenance")
LISTEN_JOBS = Queries("jobrelay.jobs").listen_jobs  # the channel of enqueue wake-ups
# Cancelled workflows swept, and ended workflows pruned, per pass of the step reconciler.
WORKFLOWS_PER_PASS = 100
# Held jobs per heartbeat statement: a worker holds slots + prefetch jobs, so one statement.
HEARTBEATS_MAX = 1000


class _PoolLoop(Loop):
    """A loop that runs repair statements on the shared pool, `limit` rows at a time."""

    default_limit = 1000

    def __init__(
        self, *, pool: AsyncConnectionPool[Connection], interval_s: float, limit: int | None = None
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._pool = pool
        self._limit = int(positive("limit", self.default_limit if limit is None else limit))


class LeaseRescuer(_PoolLoop):
    name = "lease-rescuer"

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            rescued = await claims.rescue_expired(conn, limit=self._limit)
        if rescued:
            log.info("rescued %d jobs with expired leases", len(rescued))
        return len(rescued)


class StepReconciler(_PoolLoop):
    """The workflows' repairs and retention, each pass:

    - releases (or ends) held steps none of whose dependencies is active: the repair for
      an ending that did not count itself (a rescue, a cancel, an old release), examining
      `limit` steps a pass from where the last pass stopped (a bounded cost per pass);
    - ends the active steps of cancelled workflows a cancel could not reach at once;
    - prunes workflows ended longer than `retention_s` ago (None: kept forever)."""

    name = "step-reconciler"
    default_limit = 2000

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        interval_s: float,
        limit: int | None = None,
        retention_s: float | None = None,
    ) -> None:
        super().__init__(pool=pool, interval_s=interval_s, limit=limit)
        self.retention_s = retention_s
        self._repair = release.RepairCursor()

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            found = await release.reconcile_stuck(conn, limit=self._limit, cursor=self._repair)
            cancelled = await control.end_cancelled_steps(conn, limit=WORKFLOWS_PER_PASS)
            pruned = 0
            if self.retention_s is not None:
                pruned = await control.prune_workflows(
                    conn, retention_s=self.retention_s, limit=WORKFLOWS_PER_PASS
                )
        if found:
            log.warning("reconciler released or ended %d held workflow steps", found)
        if cancelled:
            log.warning("reconciler ended %d steps of cancelled workflows", cancelled)
        if pruned:
            log.info("retention: %d ended workflows pruned with their steps", pruned)
        return found + cancelled + pruned


class ParentReconciler(_PoolLoop):
    name = "parent-reconciler"
    default_limit = 500

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            ended = await claims.reconcile_stale_parents(conn, limit=self._limit)
        if ended:
            log.warning("reconciler ended %d parents left behind: %s", len(ended), ended)
        return len(ended)


class UnservedSweeper(_PoolLoop):
    """Fails pending jobs whose type no worker has had a handler for during `after_s`
    (workers claim only their handlers' types, so such a job would wait for ever)."""

    name = "unserved-sweeper"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        interval_s: float,
        after_s: float,
        limit: int | None = None,
    ) -> None:
        super().__init__(pool=pool, interval_s=interval_s, limit=limit)
        self.after_s = positive("after_s", after_s)

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            failed = await claims.fail_unserved(conn, after_s=self.after_s, limit=self._limit)
        if failed:
            types = sorted(set(failed.values()))
            log.warning(
                "failed %d pending jobs of types no worker has had a handler for in %.0f s "
                "(JOBRELAY_JOBS_UNSERVED_FAIL_AFTER_S): %s",
                len(failed),
                self.after_s,
                ", ".join(types),
            )
        return len(failed)


class Pruner(_PoolLoop):
    name = "pruner"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        interval_s: float,
        retention: Retention,
        limit: int | None = None,
        log_threshold: int = 1000,
    ) -> None:
        super().__init__(pool=pool, interval_s=interval_s, limit=limit)
        self.retention = retention
        if log_threshold < 0:
            raise ValueError(f"log_threshold must be >= 0, got {log_threshold!r}")
        self.log_threshold = log_threshold
        self.last: RetentionPass | None = None

    async def run_once(self) -> int:
        async with self._pool.connection() as conn:
            done = await retention.apply(conn, self.retention, limit=self._limit)
        self.last = done
        # A big pass (e.g. the first worker on a table with years of history) is a warning,
        # so an operator sees the count even at the default log level.
        if done.acted or done.partitions_created:
            log.log(
                logging.WARNING if done.acted > self.log_threshold else logging.INFO,
                "retention: %d finished jobs dropped with %d partitions, %d purged from the "
                "default partition, %d moved out of jobs; %d partitions created ahead%s",
                done.dropped,
                done.partitions_dropped,
                done.purged,
                done.moved,
                done.partitions_created,
                f" (more than JOBRELAY_JOBS_PRUNE_LOG_THRESHOLD={self.log_threshold})"
                if done.acted > self.log_threshold
                else "",
            )
        return done.acted


class LeaseKeeper(Loop):
    """Heartbeats: `held()` gives the jobs whose handlers run now; `lost(job)` is called
    for each one whose claim the database no longer gives to this worker.

    Every lease/3 the held jobs replace what waits in a `jobs.buffer.Buffer` (a heartbeat
    is a state, not an event: a snapshot that failed to go out is not worth sending after
    a fresher one) and go out `HEARTBEATS_MAX` per statement."""

    name = "lease-keeper"

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        lease_s: float,
        held: Callable[[], Sequence[ClaimedJob]],
        lost: Callable[[ClaimedJob], None],
        busy: Callable[[int], None] | None = None,
    ) -> None:
        self.lease_s = positive("lease_s", lease_s)
        super().__init__(interval_s=lease_s / 3)
        self._pool = pool
        self._held = held
        self._lost = lost
        self._busy = busy
        self.beats: Buffer[ClaimedJob] = Buffer(max_size=HEARTBEATS_MAX)

    async def _run(self) -> None:
        await self._rest(self.interval_s)  # a fresh claim carries a full lease
        await super()._run()

    async def run_once(self) -> int:
        self.beats.replace(self._held())
        gone = 0
        while self.beats.waiting:
            batch, beats = await self.beats.flush(self._beat)
            for job in batch:
                if job.claim_token not in beats.held:
                    gone += 1
                    self._lost(job)
            if beats.busy and self._busy is not None:
                self._busy(len(beats.busy))
        return gone

    async def _beat(self, jobs: list[ClaimedJob]) -> claims.Heartbeats:
        async with self._pool.connection() as conn:
            return await claims.heartbeat_many(conn, jobs, lease_s=self.lease_s)
