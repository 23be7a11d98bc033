"""The job state machine and the values that travel through it (docs/explanation/design.md,
the jobs engine).

Pure and stdlib-only. `docs/explanation/state_machine.md` draws the same machine; the
transition table below is what the Hypothesis model in the tests checks the database against.

Handler outcomes are typed values (`Complete`, `Retry`, `Fail`): a handler returns one of
them, or raises; the worker turns exceptions into outcomes with `domain.retry.classify`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class JobStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """Active jobs hold their dedupe key: pending (even if not yet available) or running."""
        return self in ACTIVE_STATUSES

    @property
    def terminal(self) -> bool:
        return not self.active


ACTIVE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.IN_PROGRESS})


class FailureKind(StrEnum):
    """Why the last attempt did not complete (kept on the row for the operator)."""

    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"


class ConflictPolicy(StrEnum):
    """What an enqueue does when an active job with the same (type, dedupe key) exists."""

    IGNORE = "ignore"  # return the existing job
    MERGE = "merge"  # union a list field into the existing job, bump its revision
    SUPERSEDE = "supersede"  # a higher revision replaces the payload; lower or equal is ignored


class EnqueueOutcome(StrEnum):
    CREATED = "created"
    MERGED = "merged"
    SUPERSEDED = "superseded"
    DEDUPLICATED = "deduplicated"


class JobRole(StrEnum):
    """How a job type takes part in parent/child work (a parent always ends:
    docs/explanation/state_machine.md, parents and children)."""

    JOB = "job"  # an ordinary job: claimed and run by a worker
    PARENT = "parent"  # waits (pending, never claimed) until its children are terminal
    DISPATCH = "dispatch"  # child of a parent that creates the parent's other children


class Transition(StrEnum):
    """Every way a job row changes status; each is one SQL statement in `jobs/queries`."""

    CLAIM = "claim"  # pending -> in_progress (fresh token, attempt + 1)
    COMPLETE = "complete"  # in_progress -> completed (token and revision still match)
    REQUEUE_REVISION = "requeue_revision"  # in_progress -> pending (revision changed)
    RETRY = "retry"  # in_progress -> pending, available later (retryable failure)
    FAIL = "fail"  # in_progress -> failed (permanent, or attempts used up)
    RELEASE = "release"  # in_progress -> pending (worker gives the job back, attempt undone)
    RESCUE = "rescue"  # in_progress -> pending (lease expired, attempts left)
    EXPIRE = "expire"  # in_progress -> failed lease_expired (lease expired, no attempts left)
    CANCEL = "cancel"  # pending | in_progress -> cancelled
    RETRY_FAILED = "retry_failed"  # failed | cancelled -> pending (operator, fresh attempts)


TRANSITIONS: Mapping[Transition, tuple[frozenset[JobStatus], JobStatus]] = {
    Transition.CLAIM: (frozenset({JobStatus.PENDING}), JobStatus.IN_PROGRESS),
    Transition.COMPLETE: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.COMPLETED),
    Transition.REQUEUE_REVISION: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.PENDING),
    Transition.RETRY: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.PENDING),
    Transition.FAIL: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.FAILED),
    Transition.RELEASE: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.PENDING),
    Transition.RESCUE: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.PENDING),
    Transition.EXPIRE: (frozenset({JobStatus.IN_PROGRESS}), JobStatus.FAILED),
    Transition.CANCEL: (ACTIVE_STATUSES, JobStatus.CANCELLED),
    Transition.RETRY_FAILED: (
        frozenset({JobStatus.FAILED, JobStatus.CANCELLED}),
        JobStatus.PENDING,
    ),
}


def next_status(current: JobStatus, transition: Transition) -> JobStatus | None:
    """The status after `transition`, or None when it does not apply to `current`."""
    sources, target = TRANSITIONS[transition]
    return target if current in sources else None


# Outputs that join the completing transaction. The argument is the open database
# connection (typed loosely here: the domain knows no driver).
OutputWriter = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Complete:
    """The job succeeded. `outputs` runs in the transaction that re-checks the claim token
    and the revision and completes the job; it never runs for a stale claim."""

    result: Mapping[str, Any] | None = None
    outputs: OutputWriter | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """A transient failure: try again after the policy's backoff (or `delay_s` if given)."""

    error: str
    delay_s: float | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    """A permanent failure: the job ends `failed` now, whatever attempts are left."""

    error: str


Outcome = Complete | Retry | Fail


class LeaseLost(Exception):
    """A write of a claimed job matched no row: the claim token no longer holds the job
    (lease expired and reclaimed, job cancelled). The worker stops the handler and writes
    nothing else for this claim."""

    def __init__(self, job_id: object, action: str) -> None:
        super().__init__(f"lease lost on job {job_id} ({action} matched no row)")
        self.job_id = job_id
        self.action = action


class RowLocked(Exception):
    """A write found its job's row (or the parent it must lock first) locked by another
    transaction and did not wait: nothing was written; try again. A claimed job's claim
    still holds meanwhile."""

    def __init__(self, job_id: object, action: str) -> None:
        super().__init__(
            f"job {job_id}: {action} deferred, a row it needs is locked by another transaction"
        )
        self.job_id = job_id
        self.action = action
