"""What the jobs worker counts, each event in one place (issue 41).

The worker keeps two sets of counters: `WorkerStats` (plain integers for tests and the
stop log line) and `WorkerMetrics` (Prometheus, on `/metrics`). Every event the producer,
the executor, the completer and the supervisor count is one method of `WorkerCounters`,
which updates both, so the two can no longer drift apart by a forgotten line. It counts
and nothing else: no I/O, no decisions. Metric names and stats fields are those of
`jobs.metrics` and `jobs.worker_config`.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobrelay.jobs.claims import Completion
from jobrelay.jobs.metrics import WorkerMetrics
from jobrelay.jobs.models import ClaimedJob
from jobrelay.jobs.worker_config import WorkerStats


class WorkerCounters:
    """The events one worker counts, each into its `WorkerStats` and its `WorkerMetrics`.

    Built once by `jobs.worker.Worker` and shared by its producer, executor and completer;
    `stats` and `metrics` are the worker's own (`Worker.stats`, `Worker.metrics`)."""

    def __init__(self, stats: WorkerStats, metrics: WorkerMetrics) -> None:
        self.stats = stats
        self.metrics = metrics

    # -- claims (producer) -------------------------------------------------------------

    def claim_took(self, seconds: float) -> None:
        """One claim statement returned after `seconds` (its latency histogram)."""
        self.metrics.claim_latency.observe(seconds)

    def claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        """One claim statement ran and claimed `jobs` (possibly none)."""
        self.stats.claims += 1
        self.stats.claimed += len(jobs)
        for job in jobs:
            self.metrics.claimed.labels(job.type).inc()

    def claim_race(self) -> None:
        """A claim lost a race with another claimer on a unique index and is retried."""
        self.stats.claim_races += 1

    def started(self, job: ClaimedJob) -> None:
        """`job`'s run started: it takes a running slot of its class."""
        self.metrics.running.labels(job.concurrency_class).inc()

    def ended(self, job: ClaimedJob) -> None:
        """`job`'s run ended: its running slot is free again."""
        self.metrics.running.labels(job.concurrency_class).dec()

    # -- runs (executor) ---------------------------------------------------------------

    def handler_ran(self, job: ClaimedJob, seconds: float) -> None:
        """`job`'s handler returned, raised or was cancelled after `seconds`."""
        self.metrics.handler_duration.labels(job.type).observe(seconds)

    def released(self) -> None:
        """One claim was given back (pending at once, attempt undone)."""
        self.stats.released += 1
        self.metrics.released.inc()

    def retried(self, job: ClaimedJob) -> None:
        """One failed attempt of `job` was put back for a retry."""
        self.stats.retried += 1
        self.metrics.retried.labels(job.type).inc()

    def failed(self, job: ClaimedJob) -> None:
        """`job` ended failed (permanent, or out of attempts)."""
        self.stats.failed += 1
        self.metrics.failed.labels(job.type).inc()

    def parents_ended(self, count: int) -> None:
        """Ending jobs ended `count` parents with them."""
        self.stats.parents_ended += count

    # -- outcomes (executor and completer) ---------------------------------------------

    def completion(self, job: ClaimedJob, status: Completion) -> None:
        """What recording a completion of `job` did: completed, requeued (its revision
        moved on), failed, deferred (its row locked elsewhere) or nothing (claim lost)."""
        if status is Completion.COMPLETED:
            self.stats.completed += 1
            self.metrics.completed.labels(job.type).inc()
        elif status is Completion.REQUEUED:
            self.stats.requeued += 1
        elif status is Completion.FAILED:
            self.failed(job)
        elif status is Completion.DEFERRED:
            self.deferred("complete")
        else:
            self.lost()

    def lost(self) -> None:
        """One job whose claim this worker lost (nothing of it was written)."""
        self.stats.lease_lost += 1
        self.metrics.lease_lost.inc()

    def deferred(self, write: str, count: int = 1) -> None:
        """`count` writes (`write`: "complete", "outcome", "heartbeat") left for the next
        try because another transaction locks their rows."""
        self.stats.deferred += count
        self.metrics.rows_deferred.labels(write).inc(count)

    def refused(self, found: str) -> None:
        """One result that could not be stored (`found`: "checked" before the write, or
        "split" out of a batched write PostgreSQL refused)."""
        self.stats.split_out += found == "split"
        self.metrics.rows_refused.labels(found).inc()

    def error(self) -> None:
        """One claim, flush or outcome write failed (logged; retried or left to the lease)."""
        self.stats.errors += 1
