"""The producer: claims jobs into free slots and starts their runs.

Why claims are exclusive and expire, and how slots and global caps share capacity:
docs/explanation/design.md, "The jobs engine"; the claim's transition and guard:
docs/explanation/state_machine.md.

The task `jobrelay-worker-claim` claims, per concurrency class, as many jobs as that class
has free slots plus what may be claimed ahead (`prefetch`), with one `claim_jobs`
statement on a connection of its own that runs only claims and whose commits do not wait
for the WAL flush (`claims.configure_claim_session`; global caps, rates and per-source
serialization are enforced there). Each claimed job takes a slot of its class: it runs in
its own task (`Executor.execute`) while the class has a running slot free, else it is held
in the backlog (heartbeated, started as slots free). The loop then waits until a slot of a
class that may have more work frees, a notification arrives (`more_work`: LISTEN/NOTIFY
on enqueue, or a write that freed a source or a capped slot) or the poll interval passes.

Before a claim, the claim floors of the classes are refreshed when due (`jobs.floors`, on
the claim connection): the claim reads the pending indexes from there on, so its cost does
not grow with the dead index entries an old snapshot keeps (issue 27).

A class whose last claim got every job it asked for is hungry: more may be waiting, so a
slot of it freeing is worth a claim. A class whose claim came back short waits for a
notification (or the poll) instead of claiming again at the end of every job.

Lease loss (`lease_lost`, from the lease keeper): a running job's task is cancelled (its
executor writes nothing); a held one is forgotten. The claim loop is a hot path: it keeps
its own `while` and uses `loops.Backoff` and `loops.Health` rather than `loops.Loop`,
whose fixed rest between iterations it cannot have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, companion_pool
from jobrelay.domain.jobs_config import QueueLimits
from jobrelay.jobs import claims
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.executor import Executor, Run
from jobrelay.jobs.floors import ClaimFloors
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.worker_config import WorkerConfig
from jobrelay.loops import Backoff, Health

# A child of the worker's logger, so a level set for `jobrelay.jobs.worker` still applies.
log = logging.getLogger("jobrelay.jobs.worker.producer")
# After failures in a row the claim loop waits 0.2 s, 0.4 s, ... up to 1 s (a listener that
# reconnects wakes it sooner).
_CLAIM_BACKOFF = Backoff(base_s=0.2, cap_s=1.0)


class Producer:
    """Claims jobs for the slots of `config` and hands each to `executor`."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        config: WorkerConfig,
        limits: QueueLimits,
        executor: Executor,
        counters: WorkerCounters,
    ) -> None:
        self.config = config
        self._slots = config.class_slots
        self._limits = limits  # what every claim of this worker obeys, fixed for its life
        self._executor = executor
        self._counters = counters
        # Runs by claim token, not job id: a job retried at once can be claimed again by
        # this worker while the run that retried it is still returning its connection.
        self.runs: dict[uuid.UUID, Run] = {}
        self._busy: Counter[str] = Counter()  # slots taken per class (running + held)
        self.backlog: list[ClaimedJob] = []  # claimed ahead (prefetch), not started
        self._wake = asyncio.Event()  # there may be work to claim, or stop requested
        self._hungry: set[str] = set(self._slots)
        self._stopping = False
        self._idle = False
        self._task: asyncio.Task[None] | None = None
        self.floors = ClaimFloors() if config.claim_floors else None
        # Claims run on a connection of their own, set up for claims only (no durable
        # commit to wait for, one generic plan); everything else uses the shared pool.
        self.claim_pool: AsyncConnectionPool[Connection] = companion_pool(
            pool,
            name=f"{pool.name}-claims",
            max_size=1,
            configure=claims.configure_claim_session if config.claim_session_settings else None,
        )

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def idle(self) -> bool:
        """True while the claim loop waits for work (a notification, a free slot, a poll)."""
        return self._idle

    async def start(self) -> None:
        """Open the claim connection and run the claim loop as `jobrelay-worker-claim`."""
        if self._task is not None:
            raise RuntimeError("producer already started")
        await self.claim_pool.open(wait=False)
        self._task = asyncio.create_task(self._claim_loop(), name="jobrelay-worker-claim")

    async def stop(self) -> None:
        """Stop claiming (a claim in progress ends first) and close the claim connection.
        Runs go on; `release_backlog` and `finish` end them."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        await asyncio.gather(task, return_exceptions=True)
        await self.claim_pool.close()

    async def release_backlog(self) -> None:
        """Give back the claims of the held jobs that never started."""
        backlog, self.backlog = self.backlog, []
        for job in backlog:
            await self._executor.release(job)
            self.runs.pop(job.claim_token, None)
            self._busy[job.concurrency_class] -= 1

    async def finish(self, grace_s: float) -> None:
        """Let running jobs finish for `grace_s`, then cancel the rest (their executor
        releases their claims) and wait for them."""
        running = [run.task for run in self.runs.values() if run.task is not None]
        if not running:
            return
        _, late = await asyncio.wait(running, timeout=grace_s)
        for run in list(self.runs.values()):
            if run.task in late and not run.settling:
                run.task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def more_work(self) -> None:
        """New work may be claimable (a notification, or a source or capped slot freed by
        this worker): every class is worth a claim again."""
        self._hungry.update(self._slots)
        self._wake.set()

    def noticed(self, payload: str | None) -> None:
        """A notification's payload (None: the listener (re)connected, some may be lost):
        a job that went back to its old place in the queue makes the floors read it all."""
        if self.floors is not None:
            self.floors.noticed(payload)

    # -- leases ------------------------------------------------------------------------

    def held(self) -> list[ClaimedJob]:
        """The jobs whose claims this worker must keep: running (not yet settling, or
        settling but waiting for a lock on its row) or held."""
        return [r.job for r in self.runs.values() if (r.locked or not r.settling) and not r.lost]

    def lease_lost(self, job: ClaimedJob) -> None:
        """The database no longer gives `job` to this worker: stop its handler, or forget it
        if it was held."""
        run = self.runs.get(job.claim_token)
        if run is None or run.settling or run.lost:
            return  # finished meanwhile: its own write decides
        run.lost = True
        log.warning("job %s: lease lost, stopping its handler", job.id)
        if run.task is not None:
            run.task.cancel()
        else:  # held, not started: just forget it
            self.backlog = [j for j in self.backlog if j.claim_token != job.claim_token]
            self.runs.pop(job.claim_token, None)
            self._busy[run.job.concurrency_class] -= 1
            self._counters.lost()

    # -- claim loop --------------------------------------------------------------------

    def _free(self) -> tuple[dict[str, int], int]:
        """Free slots per class and in all, plus what may be claimed ahead (prefetch)."""
        ahead = max(self.config.prefetch - len(self.backlog), 0)
        total = self.config.total_slots - sum(self._busy.values()) + ahead
        limits = {
            c: n - self._busy[c] + ahead
            for c, n in self._slots.items()
            if n - self._busy[c] + ahead > 0
        }
        return limits, min(total, sum(limits.values()))

    async def _claim_once(self, limits: dict[str, int], total: int) -> list[ClaimedJob]:
        """Claim up to the free slots with one statement on the claim connection, whose
        commits do not wait for the WAL flush (`claims.configure_claim_session`): a claim
        never waits behind a durable commit; the completer records completions meanwhile."""
        started = time.perf_counter()
        async with self.claim_pool.connection() as conn:
            floors = None if self.floors is None else await self.floors.refresh(conn, limits)
            jobs = await claims.claim(
                conn,
                self._limits,
                worker_id=self.worker_id,
                wanted=limits,
                total=total,
                floors=floors,
            )
        self._counters.claim_took(time.perf_counter() - started)
        return jobs

    async def _claim_loop(self) -> None:
        health = Health("worker-claim", backoff=_CLAIM_BACKOFF)
        poll_s = self.config.poll_interval_s
        while not self._stopping:
            limits, total = self._free()
            if total <= 0:
                self._wake.clear()
                if self._free()[1] <= 0 and not self._stopping:
                    await self._pause(poll_s)
                continue
            self._wake.clear()
            try:
                jobs = await self._claim_once(limits, total)
            except Exception as exc:
                if claims.is_claim_race(exc):
                    # Another claimer committed a job of the same source (or slot) after
                    # this statement's snapshot; the unique index refused ours. Retry.
                    self._counters.claim_race()
                    log.debug("claim lost a race on %s; retrying", exc)
                    await asyncio.sleep(0)
                    continue
                self._counters.error()
                await self._pause(health.failed(exc))
                continue
            health.ok()
            self._counters.claimed(jobs)
            got = Counter(job.concurrency_class for job in jobs)
            for cls, asked in limits.items():
                if got[cls] >= asked:
                    self._hungry.add(cls)
                else:
                    self._hungry.discard(cls)
            for job in jobs:
                self._busy[job.concurrency_class] += 1
                self.backlog.append(job)
            self._start_backlog()
            if len(jobs) < total:
                await self._pause(poll_s)

    async def _pause(self, timeout_s: float) -> None:
        """Wait `timeout_s`, or less when there may be work to claim (a slot of a hungry
        class frees, `more_work`) or stop is requested."""
        self._idle = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_s)
        finally:
            self._idle = False

    # -- slots -------------------------------------------------------------------------

    def _start_backlog(self) -> None:
        """Start held jobs while their class has a running slot free."""
        running: Counter[str] = Counter(
            r.job.concurrency_class for r in self.runs.values() if r.started
        )
        waiting: list[ClaimedJob] = []
        total_running = sum(running.values())
        for job in self.backlog:
            cls = job.concurrency_class
            if running[cls] < self._slots.get(cls, 0) and total_running < self.config.total_slots:
                running[cls] += 1
                total_running += 1
                self._spawn(job)
            else:
                waiting.append(job)
        self.backlog = waiting
        for job in waiting:  # held jobs are heartbeated too
            self.runs.setdefault(job.claim_token, Run(job))

    def _spawn(self, job: ClaimedJob) -> None:
        run = self.runs.get(job.claim_token) or Run(job)
        run.started = True
        run.task = asyncio.create_task(self._executor.execute(run), name=f"job:{job.type}:{job.id}")
        self.runs[job.claim_token] = run
        self._counters.started(job)
        run.task.add_done_callback(lambda _: self._finished(run))

    def _finished(self, run: Run) -> None:
        if self.runs.pop(run.job.claim_token, None) is not None:
            self._busy[run.job.concurrency_class] -= 1
            self._counters.ended(run.job)
        if self.backlog and not self._stopping:
            self._start_backlog()
        if run.job.concurrency_class in self._hungry:
            self._wake.set()
