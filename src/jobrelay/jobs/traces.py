"""The jobs engine's spans (`jobrelay.tracing`; all of them no-ops while tracing is off).

* `jobrelay.jobs.enqueue` (producer): one per enqueue call, single or bulk, around its
  statements; every row it writes records its context (`jobs.traceparent`), so the work
  of the job continues this trace, in whatever process claims it.
* `jobrelay.jobs.claim` (internal): one per claimed job, from the start of the claim
  statement to its commit, under the job's recorded context.
* `jobrelay.jobs.run <type>` (consumer): one per attempt, under the job's recorded context,
  from the handler's start to its outcome's record; a failed or retried attempt has the
  error status. Jobs the handler enqueues are its children.

Claim and run spans carry the job's id, type, attempt and a hash of its claim token
(`tracing.token_hash`): two attempts, or a rescued claim, are told apart by it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from jobrelay import tracing
from jobrelay.domain.jobs import Complete, Outcome
from jobrelay.jobs.models import ClaimedJob, Enqueued, EnqueueRequest

if TYPE_CHECKING:
    from opentelemetry.trace import Span


def job_attributes(job: ClaimedJob) -> tracing.Attributes:
    """What the claim and run spans of one attempt say about it."""
    return {
        "jobrelay.job.id": str(job.id),
        "jobrelay.job.type": job.type,
        "jobrelay.job.attempt": job.attempt_count,
        "jobrelay.job.max_attempts": job.max_attempts,
        "jobrelay.job.claim_token_hash": tracing.token_hash(job.claim_token),
        "jobrelay.job.class": job.concurrency_class,
    }


def enqueue_span(requests: Sequence[EnqueueRequest]) -> AbstractContextManager[Span | None]:
    """The span of one enqueue call (the rows it writes record its context)."""
    if not tracing.enabled():
        return tracing.span("jobrelay.jobs.enqueue")  # the shared no-op
    types = sorted({request.type for request in requests})
    return tracing.span(
        "jobrelay.jobs.enqueue",
        kind="producer",
        attributes={
            "jobrelay.jobs.count": len(requests),
            "jobrelay.job.type": ",".join(types[:10]),
        },
    )


def enqueued(results: Sequence[Enqueued]) -> None:
    """Name the job (and outcome) an enqueue of one job landed in on its span."""
    if len(results) == 1 and tracing.enabled():
        tracing.annotate(
            {
                "jobrelay.job.id": str(results[0].id),
                "jobrelay.job.enqueue_outcome": str(results[0].outcome),
            }
        )


def record_claims(jobs: Sequence[ClaimedJob], started_ns: int, worker_id: str) -> None:
    """One claim span per claimed job, each under the job's own context: from `started_ns`
    (`time.time_ns()` before the claim statement) to now."""
    if not tracing.enabled():
        return
    ended_ns = time.time_ns()
    for job in jobs:
        span = tracing.start_span(
            "jobrelay.jobs.claim",
            parent=job.traceparent,
            attributes={**job_attributes(job), "jobrelay.worker.id": worker_id},
            start_ns=started_ns,
        )
        tracing.end_span(span, end_ns=ended_ns)


def run_span(job: ClaimedJob) -> AbstractContextManager[Span | None]:
    """The span of one attempt of `job`, active while its handler runs and its outcome is
    recorded."""
    if not tracing.enabled():
        return tracing.span("jobrelay.jobs.run")  # the shared no-op
    return tracing.span(
        f"jobrelay.jobs.run {job.type}",
        kind="consumer",
        parent=job.traceparent,
        attributes=job_attributes(job),
    )


def settled(outcome: Outcome) -> None:
    """Say on the run span how the attempt ended: a `Retry` or `Fail` is an error."""
    if not tracing.enabled():
        return
    tracing.annotate({"jobrelay.job.outcome": type(outcome).__name__.lower()})
    if not isinstance(outcome, Complete):
        tracing.fail(outcome.error)


def lease_lost() -> None:
    """Say on the run span that the claim was lost (nothing was written)."""
    if tracing.enabled():
        tracing.annotate({"jobrelay.job.outcome": "lease_lost"})
        tracing.fail("lease lost: the handler was stopped and nothing was written")
