"""The completer: records finished jobs, many per durable commit.

A job whose handler returned a plain `Complete` (no fenced outputs) is handed to the
completer (`add`) instead of being written by its run. The task `jobrelay-worker-flush`
records them on a connection of the shared pool, up to 1,000 per `complete_jobs`
statement, parents reconciled in the same transaction (`claims.settle_many`). A batch
commits while the next one accumulates in a `jobs.buffer.Buffer` (group commit), so the
claim loop never waits for a durable commit. A flush that fails for the database's sake (a
lost connection) puts its batch back in front and retries after a backoff (`Health`: one
log line when it starts failing, one when it recovers).

One row never holds the batch: a flush PostgreSQL refuses for its data (a result it cannot
store that the executor's check did not foresee) is split until the refused rows stand
alone (`db.isolate`), the rest is recorded, and each refused job fails permanently, naming
why. A job whose row (or parent) another transaction locks is deferred: the rest is
recorded, and it is tried again every 50-500 ms, its lease kept by the lease keeper
(`deferred_jobs`), until the lock goes; the claim token fences it as any completion.

The bounded flush window (`WorkerConfig.hold_slot_until_recorded`): when more than 4
completions per slot of the worker are not yet recorded (waiting or being committed),
`add` asks the run to keep its slot until its completion is recorded (`until_recorded`,
at most one lease), which bounds the finished handlers a SIGKILL can make run again to
5 x slots. While the flush keeps up nothing waits.

On `stop()` the completer records everything still waiting; while the database is
unreachable it keeps trying for one lease, then gives up (the leases expire and the jobs
run again elsewhere) and releases every run still waiting for its record.

Like River's `internal/jobcompleter` (a batch completer behind the executor), it never
imports the producer: what recording a job frees is reported through `freed()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.isolate import write_isolating
from jobrelay.db.pool import Connection
from jobrelay.domain.jobs import FailureKind
from jobrelay.domain.storable import unstorable
from jobrelay.jobs import claims
from jobrelay.jobs.buffer import Buffer
from jobrelay.jobs.claims import Completion, Done, Failure
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.models import ClaimedJob, frees_claims
from jobrelay.jobs.worker_config import WorkerConfig
from jobrelay.loops import Backoff, Health

# A child of the worker's logger, so a level set for `jobrelay.jobs.worker` still applies.
log = logging.getLogger("jobrelay.jobs.worker.completer")
# The bounded flush window (hold_slot_until_recorded): unrecorded completions per slot
# beyond which a finished job waits for the flush; a fast drain of short jobs stays below it.
FLUSH_WINDOW = 4
FLUSH_MAX = 1000  # completions per statement
# After failures in a row the flush waits 0.1 s, 0.2 s, ... up to 2 s: finished jobs wait on it.
_FLUSH_BACKOFF = Backoff(base_s=0.1, cap_s=2.0)
# Deferred completions (their rows locked elsewhere) are tried again after 50 ms, 100 ms,
# ... at most 500 ms apart, so one completes well within a second of its lock going.
_DEFERRED_BACKOFF = Backoff(base_s=0.05, cap_s=0.5)


class Completer:
    """Records plain completions in batches. `start()`, `add()` per finished job, `stop()`."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        config: WorkerConfig,
        counters: WorkerCounters,
        freed: Callable[[], None],
        failpoints: Failpoints = NO_FAILPOINTS,
    ) -> None:
        self._pool = pool
        self._lease_s = config.lease_s
        self._lock_timeout_s = config.lock_timeout_s
        self._capped = frozenset(config.global_caps)
        # Unrecorded completions past which a finished job keeps its slot (None: never).
        self._window = (
            FLUSH_WINDOW * config.total_slots if config.hold_slot_until_recorded else None
        )
        self._counters = counters
        self._freed = freed
        self._failpoints = failpoints
        self.buffer: Buffer[Done] = Buffer(max_size=FLUSH_MAX)
        # Completions whose rows another transaction locked, for the next round.
        self._deferred: list[Done] = []
        self._deferred_rounds = 0
        # Runs waiting for their buffered completion to be recorded, by claim token.
        self._recorded: dict[uuid.UUID, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, done: Done) -> bool:
        """Buffer one completion; True when the flush is behind by more than the window,
        and the run should keep its slot until `until_recorded(done.job)` returns."""
        self.buffer.add(done)
        # Waiting on every completion would cost a drain of short jobs a third of its rate;
        # past the window a SIGKILL would re-run more than (FLUSH_WINDOW + 1) x slots.
        return self._window is not None and self.buffer.pending > self._window

    async def until_recorded(self, job: ClaimedJob) -> None:
        """Keep this job's slot until the flush recorded its completion, at most one lease
        (past it the lease has expired anyway; a stop never waits longer either)."""
        recorded = asyncio.get_running_loop().create_future()
        self._recorded[job.claim_token] = recorded
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(recorded), self._lease_s)
        finally:
            self._recorded.pop(job.claim_token, None)

    def start(self) -> None:
        """Run the flush as the task `jobrelay-worker-flush`."""
        if self._task is not None:
            raise RuntimeError("completer already started")
        self._task = asyncio.create_task(self._flush_loop(), name="jobrelay-worker-flush")

    async def stop(self) -> None:
        """Record every completion still waiting (giving up after one lease), then end."""
        task, self._task = self._task, None
        if task is None:
            return
        self.buffer.close()
        await asyncio.gather(task, return_exceptions=True)

    def deferred_jobs(self) -> list[ClaimedJob]:
        """Jobs whose completion waits for another transaction's lock on their row: the
        lease keeper keeps their leases meanwhile (where the lock allows)."""
        return [d.job for d in self._deferred]

    async def _settle(self, batch: list[Done]) -> claims.Settled:
        async with self._pool.connection() as conn:
            return await claims.settle_many(
                conn, batch, failpoints=self._failpoints, lock_timeout_s=self._lock_timeout_s
            )

    async def _write(self, batch: list[Done]) -> claims.Settled:
        """Record `batch`; rows PostgreSQL refuses are split out and their jobs failed."""
        isolated = await write_isolating(batch, self._settle)
        settled = claims.Settled()
        for _part, written in isolated.written:
            settled.statuses.update(written.statuses)
            settled.parents_ended.update(written.parents_ended)
        if isolated.refused:
            failures = []
            for done, exc in isolated.refused:
                reason = unstorable(done.result) or (exc.diag.message_primary or str(exc))
                log.warning("job %s: result cannot be stored (%s); failing it", done.job.id, reason)
                self._counters.refused("split")
                failures.append(
                    Done(
                        done.job,
                        failure=Failure(
                            FailureKind.PERMANENT, f"result cannot be stored: {reason}"
                        ),
                    )
                )
            failed = await self._settle(failures)
            settled.statuses.update(failed.statuses)
            settled.parents_ended.update(failed.parents_ended)
        return settled

    async def _next_round(self) -> None:
        """Wait for a flush to be due; with deferred completions, at most until they are
        due again, and then put them back in the buffer."""
        if not self._deferred:
            await self.buffer.wait()
            return
        self._deferred_rounds += 1
        delay = _DEFERRED_BACKOFF.delay(self._deferred_rounds)
        if self.buffer.closed:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.buffer.wait(), delay)
        deferred, self._deferred = self._deferred, []
        for done in deferred:
            self.buffer.add(done)

    async def _flush_loop(self) -> None:
        """Record finished jobs, durably, on a connection of their own: while one batch
        commits the next accumulates (group commit), and claims never wait for it."""
        health = Health("worker-flush", backoff=_FLUSH_BACKOFF)
        loop = asyncio.get_running_loop()
        give_up_at: float | None = None
        buffer = self.buffer
        while True:
            await self._next_round()
            while buffer.waiting:
                try:
                    batch, settled = await buffer.flush(self._write)
                except Exception as exc:
                    self._counters.error()
                    if buffer.closed and give_up_at is None:
                        give_up_at = loop.time() + self._lease_s
                    if give_up_at is not None and loop.time() > give_up_at:
                        lost = buffer.drain()
                        log.error(
                            "could not record %d completions before stopping; their leases "
                            "will expire and the jobs run again",
                            len(lost),
                            exc_info=True,
                        )
                        self._release_recorded(lost)
                        return
                    await asyncio.sleep(health.failed(exc))
                    continue
                health.ok()
                deferred = [d for d in batch if settled.statuses[d.job.id] is Completion.DEFERRED]
                if deferred:
                    self._deferred.extend(deferred)
                else:
                    self._deferred_rounds = 0
                recorded = [
                    d for d in batch if settled.statuses[d.job.id] is not Completion.DEFERRED
                ]
                self._release_recorded(recorded)
                self._count_settled(batch, settled)
                if any(frees_claims(d.job, self._capped) for d in recorded):
                    self._freed()  # a source or capped slot is free in the database now
            if buffer.closed:
                if not self._deferred:
                    return
                if give_up_at is None:
                    give_up_at = loop.time() + self._lease_s
                if loop.time() > give_up_at:
                    log.error(
                        "could not record %d completions before stopping: their rows stayed "
                        "locked by another transaction; their leases will expire and the "
                        "jobs run again",
                        len(self._deferred),
                    )
                    self._release_recorded(self._deferred)
                    self._deferred = []
                    return

    def _release_recorded(self, batch: Sequence[Done]) -> None:
        for d in batch:
            recorded = self._recorded.pop(d.job.claim_token, None)
            if recorded is not None and not recorded.done():
                recorded.set_result(None)

    def _count_settled(self, done: Sequence[Done], settled: claims.Settled) -> None:
        for d in done:
            self._counters.completion(d.job, settled.statuses[d.job.id])
        self._counters.parents_ended(len(settled.parents_ended))
