"""Rows of the jobs engine as values: a claimed job, a job as callers see it, an enqueue result."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from jobrelay.domain.errors import FieldError
from jobrelay.domain.jobs import EnqueueOutcome, FailureKind, JobStatus

# What an enqueue accepts, whoever asks (API, CLI, a handler, a schedule): the one source of
# these numbers; the API schema documents them from here. Priority is a smallint, 0 the most
# urgent.
MIN_PRIORITY, MAX_PRIORITY = 0, 32767
MIN_ATTEMPTS, MAX_ATTEMPTS = 1, 1000
MAX_DELAY_S = 366 * 86400  # a longer delay is a unit mistake more often than a plan


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a worker holds after a claim. `claim_token` and `revision` fence every write;
    `traceparent` is the trace context its enqueue recorded (`jobs.traces`)."""

    id: uuid.UUID
    type: str
    payload: Mapping[str, Any]
    revision: int
    claim_token: uuid.UUID
    attempt_count: int
    max_attempts: int
    source_key: str | None
    concurrency_class: str
    parent_id: uuid.UUID | None
    traceparent: str | None = None
    workflow_id: uuid.UUID | None = None  # the workflow it is a step of (`jobs.workflows`)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ClaimedJob:
        return cls(
            id=row["id"],
            type=row["type"],
            payload=row["payload"],
            revision=row["revision"],
            claim_token=row["claim_token"],
            attempt_count=row["attempt_count"],
            max_attempts=row["max_attempts"],
            source_key=row["source_key"],
            concurrency_class=row["concurrency_class"],
            parent_id=row["parent_id"],
            traceparent=row.get("traceparent"),
            workflow_id=row.get("workflow_id"),
        )


def frees_claims(job: ClaimedJob, capped: Collection[str]) -> bool:
    """Whether recording this job's end can make another job claimable: the next job of
    its source, or a slot of a globally capped class (`capped`)."""
    return job.source_key is not None or job.concurrency_class in capped


@dataclass(frozen=True, slots=True)
class Job:
    """A job row as the API and CLI show it (the claim token stays inside the engine)."""

    id: uuid.UUID
    type: str
    status: JobStatus
    payload: Mapping[str, Any]
    dedupe_key: str | None
    revision: int
    parent_id: uuid.UUID | None
    source_key: str | None
    concurrency_class: str
    fairness_key: str | None
    priority: int
    attempt_count: int
    max_attempts: int
    available_at: dt.datetime
    claimed_by: str | None
    claimed_at: dt.datetime | None
    lease_expires_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    failure_kind: FailureKind | None
    last_error: str | None
    result: Mapping[str, Any] | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        kind = row["failure_kind"]
        return cls(
            id=row["id"],
            type=row["type"],
            status=JobStatus(row["status"]),
            payload=row["payload"],
            dedupe_key=row["dedupe_key"],
            revision=row["revision"],
            parent_id=row["parent_id"],
            source_key=row["source_key"],
            concurrency_class=row["concurrency_class"],
            fairness_key=row["fairness_key"],
            priority=row["priority"],
            attempt_count=row["attempt_count"],
            max_attempts=row["max_attempts"],
            available_at=row["available_at"],
            claimed_by=row["claimed_by"],
            claimed_at=row["claimed_at"],
            lease_expires_at=row["lease_expires_at"],
            heartbeat_at=row["heartbeat_at"],
            failure_kind=FailureKind(kind) if kind else None,
            last_error=row["last_error"],
            result=row["result"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """An attempt of a job that ended without success (`job_attempts`): a retryable or
    permanent failure, an expired lease, or a cancel while running. `claim_token` is the
    token the attempt held (spent: it fences nothing any more)."""

    job_id: uuid.UUID
    claim_token: uuid.UUID
    attempt: int
    worker_id: str | None
    started_at: dt.datetime | None
    ended_at: dt.datetime
    outcome: FailureKind
    error: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Attempt:
        return cls(
            row["job_id"],
            row["claim_token"],
            row["attempt"],
            row["worker_id"],
            row["started_at"],
            row["ended_at"],
            FailureKind(row["outcome"]),
            row["error"],
        )


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to enqueue. Defaults come from the job type (priority, max attempts).

    The enqueue contract, checked by `problems` when the request is prepared (never by the
    callers): `priority` in MIN_PRIORITY..MAX_PRIORITY, `max_attempts` in
    MIN_ATTEMPTS..MAX_ATTEMPTS, `delay_s` in 0..MAX_DELAY_S seconds, `run_at` zone-aware and
    not given with `delay_s` (None: not given; no delay).
    `dedupe_key`: the key of a job whose type's rule gives none (a schedule's tick key);
    a type that defines a dedupe key keeps its own.
    `run_at`: when the job becomes available (a past time is now).
    """

    type: str
    payload: Mapping[str, Any]
    priority: int | None = None
    delay_s: float | None = None
    max_attempts: int | None = None
    parent_id: uuid.UUID | None = None
    dedupe_key: str | None = None
    run_at: dt.datetime | None = None

    def problems(self, path: str = "") -> list[FieldError]:
        """What breaks the enqueue contract, each named by its field's path on the wire
        (camelCase, after `path`, e.g. `3.` in a bulk call); empty when nothing does."""
        errors: list[FieldError] = []
        if self.priority is not None and not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            errors.append(
                FieldError(f"{path}priority", f"must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
            )
        if self.run_at is not None and self.delay_s is not None:
            errors.append(FieldError(f"{path}delay", "give a run time or a delay, not both"))
        if self.delay_s is not None and not 0 <= self.delay_s <= MAX_DELAY_S:
            errors.append(FieldError(f"{path}delay", "must be between 0 and one year (in seconds)"))
        if self.run_at is not None and self.run_at.utcoffset() is None:
            errors.append(FieldError(f"{path}runAt", "must have a time zone offset"))
        if self.max_attempts is not None and not (
            MIN_ATTEMPTS <= self.max_attempts <= MAX_ATTEMPTS
        ):
            errors.append(
                FieldError(
                    f"{path}maxAttempts", f"must be between {MIN_ATTEMPTS} and {MAX_ATTEMPTS}"
                )
            )
        return errors


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The job an enqueue landed in and what happened to it; `job`, the stored row, when
    the caller asked for it (`Enqueuer.enqueue(..., stored=True)`)."""

    id: uuid.UUID
    outcome: EnqueueOutcome
    revision: int
    job: Job | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What `list_jobs` keeps: each field that is set must match (times: from inclusive,
    to exclusive; naive times are UTC)."""

    type: str | None = None
    status: str | None = None
    concurrency_class: str | None = None
    source_key: str | None = None
    dedupe_key: str | None = None
    created_from: dt.datetime | None = None
    created_to: dt.datetime | None = None
    finished_from: dt.datetime | None = None
    finished_to: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of `list_jobs`; pass `next_before` back to get the next (older) page."""

    jobs: list[Job]
    next_before: uuid.UUID | None
