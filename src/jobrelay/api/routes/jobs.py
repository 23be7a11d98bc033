"""Jobs endpoints (admin role): enqueue, read, list, cancel, retry, diagnosis; media
processing status."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, Field, field_validator

from jobrelay.api.deps import AdminDep, ServicesDep
from jobrelay.api.idempotency import IdempotencyKey, answer, created_once
from jobrelay.api.schemas import ApiModel
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs import EnqueueOutcome
from jobrelay.idempotency import Answer, Writer
from jobrelay.jobs.diagnosis import Diagnosis, Reason
from jobrelay.jobs.enqueue import EnqueueRequest
from jobrelay.jobs.models import MAX_DELAY_S, Attempt, Job, JobFilter

# The path parameter is `jobId`, as every id of a path is `<kind>Id` (it was `job_id`).
JobIdPath = Annotated[uuid.UUID, Path(alias="jobId", description="The job's id")]

router = APIRouter(tags=["jobs"])


class JobIn(ApiModel):
    type: str
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: int | None = None
    run_at: AwareDatetime | None = Field(
        default=None,
        description="When the job becomes available: an RFC 3339 date-time with an offset "
        "(e.g. 2026-12-01T03:00:00+01:00); a past time is now. Not with delay.",
    )
    delay: float | None = Field(
        default=None, description="Seconds (>= 0, at most a year) before the job is available."
    )
    delay_seconds: float | None = Field(
        default=None, description="The former name of delay (deprecated)."
    )
    max_attempts: int | None = None

    @field_validator("run_at", mode="before")
    @classmethod
    def _rfc3339(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):
            raise ValueError("must be an RFC 3339 date-time with an offset")
        return value


class JobOut(ApiModel):
    id: uuid.UUID
    type: str
    status: str
    payload: dict[str, Any]
    dedupe_key: str | None
    revision: int
    parent_id: uuid.UUID | None
    source_key: str | None
    concurrency_class: str
    fairness_key: str | None = Field(
        description="The tenant this job takes turns as in its class (its type's fairness "
        "key); null: the shared group"
    )
    priority: int
    attempt_count: int
    max_attempts: int
    available_at: dt.datetime
    claimed_by: str | None
    claimed_at: dt.datetime | None
    lease_expires_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    failure_kind: str | None
    last_error: str | None
    result: dict[str, Any] | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls.model_validate(job)


class EnqueuedOut(ApiModel):
    id: uuid.UUID
    outcome: EnqueueOutcome
    revision: int
    job: JobOut


class AttemptOut(ApiModel):
    """An attempt that ended without success (a completed attempt is the job itself)."""

    attempt: int = Field(description="The job's attemptCount during this attempt")
    claim_token: uuid.UUID = Field(description="The token the attempt held (spent)")
    worker_id: str | None
    started_at: dt.datetime | None
    ended_at: dt.datetime
    outcome: str = Field(description="retryable, permanent, lease_expired or cancelled")
    error: str | None

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptOut:
        return cls.model_validate(attempt, from_attributes=True)


class AttemptPageOut(ApiModel):
    items: list[AttemptOut]


class JobPageOut(ApiModel):
    items: list[JobOut]
    next_cursor: uuid.UUID | None


class BlockingJobOut(ApiModel):
    id: uuid.UUID
    type: str
    status: str
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    class_slot: int | None


class ChildCountsOut(ApiModel):
    total: int
    active: int
    completed: int
    failed: int
    cancelled: int


class PauseStateOut(ApiModel):
    claims_paused: bool
    reason: str | None
    updated_by: str
    updated_at: dt.datetime


class WorkersSeenOut(ApiModel):
    live: list[str] = Field(description="Live workers serving the job's class (at most 20)")
    live_count: int
    live_any_class: int
    last_worker: str | None = Field(description="The last worker of the class seen, live or not")
    last_heartbeat_at: dt.datetime | None


class RowLockerOut(ApiModel):
    pid: int = Field(description="Backend pid of the session holding the lock")
    application: str = Field(description="Its application_name (or user name)")
    state: str = Field(description="Its state: active, idle in transaction, ...")
    since: dt.datetime = Field(description="When its transaction began")
    mode: str | None = Field(description="The lock mode, when PostgreSQL records it")


class DiagnosisOut(ApiModel):
    """Why a job is not running (or is); see docs/reference/job_types.md, "Why isn't
    this job running?"."""

    job_id: uuid.UUID
    type: str
    status: str
    reason: Reason = Field(description="The first blocker, in the documented precedence")
    message: str
    also: list[Reason] = Field(description="Other blockers that hold too, in precedence order")
    checked_at: dt.datetime = Field(description="Database time of the reading")
    concurrency_class: str
    source_key: str | None
    attempt_count: int
    max_attempts: int
    available_at: dt.datetime
    wait_seconds: float = Field(description="Seconds until availableAt (0 when available)")
    last_error: str | None
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    holder_alive: bool | None = Field(description="Whether the claiming worker's heartbeat is live")
    blocking_jobs: list[BlockingJobOut] = Field(
        description="The job(s) named as the blocker: the source's running job, the source's "
        "next job, the holders of the class's slots, the replacing job, the cancelled parent"
    )
    children: ChildCountsOut | None
    pause: PauseStateOut
    workers: WorkersSeenOut
    global_cap: int | None
    class_running: int = Field(description="Running jobs holding a slot of the class's cap")
    ahead_in_class: int = Field(
        description="Claimable jobs of its class without a source key before it (<= 10000)"
    )
    replaced_by: uuid.UUID | None
    rate_limit: str | None = Field(
        description="The class's rate limit as the workers enforce it, e.g. 30/10s"
    )
    rate_limited_until: dt.datetime | None = Field(
        description="While the class's rate limit is reached: when the next job may start"
    )
    row_locked_by: list[RowLockerOut] = Field(
        description="Sessions holding a lock on the job's row (reason row_locked)"
    )

    @classmethod
    def of(cls, diagnosis: Diagnosis) -> DiagnosisOut:
        return cls.model_validate(diagnosis)


class MediaStatusOut(ApiModel):
    media_id: str
    status: str
    job_id: uuid.UUID | None
    revision: int | None
    failure_kind: str | None


class MediaStatusPage(ApiModel):
    items: list[MediaStatusOut]


def _request(body: JobIn) -> EnqueueRequest:
    """The body as the engine's request, which checks the enqueue contract. Two checks stay
    here because they are about the wire: `delaySeconds` is the former name of `delay`
    (one of the two), and a run time at most one year ahead, the bound of `delay` (a caller
    of the engine itself, such as the CLI, may schedule later)."""
    errors: list[FieldError] = []
    if body.delay is not None and body.delay_seconds is not None and body.run_at is None:
        errors.append(
            FieldError("delaySeconds", "give one of runAt and delay, not delay and delaySeconds")
        )
    if body.run_at is not None:
        ahead = body.run_at - dt.datetime.now(dt.UTC)  # a bound only; the database sets the time
        if ahead > dt.timedelta(seconds=MAX_DELAY_S):
            errors.append(FieldError("runAt", "must be at most one year ahead"))
    if errors:
        raise InvalidInput("invalid job", errors)
    return EnqueueRequest(
        type=body.type,
        payload=body.payload,
        priority=body.priority,
        delay_s=body.delay if body.delay is not None else body.delay_seconds,
        run_at=body.run_at,
        max_attempts=body.max_attempts,
    )


def _as_sent(exc: InvalidInput, body: JobIn) -> InvalidInput:
    """The engine's errors named as the body named the field (`delaySeconds`, if used)."""
    if body.delay is not None or body.delay_seconds is None:
        return exc
    errors = [FieldError("delaySeconds", e.message) if e.path == "delay" else e for e in exc.errors]
    return InvalidInput(exc.detail, errors)


@router.post(
    "/v1/jobs",
    response_model=EnqueuedOut,
    status_code=status.HTTP_201_CREATED,
    summary="Enqueue a job (201 created; 200 when merged into, superseding or equal to an "
    "active job with the same dedupe key)",
    responses={200: {"model": EnqueuedOut}, 422: {"description": "unknown type, bad payload"}},
)
async def enqueue_job(
    body: JobIn,
    caller: AdminDep,
    services: ServicesDep,
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    job_request = _request(body)

    async def create(conn: Writer) -> Answer:
        try:
            result = await services.jobs.enqueue(job_request, conn=conn, stored=True)
        except InvalidInput as exc:
            raise _as_sent(exc, body) from None
        created = result.outcome is EnqueueOutcome.CREATED
        # The stored row came with the write; read again only if the job was gone by then.
        job = result.job or await services.jobs.get(result.id)
        enqueued = EnqueuedOut(
            id=result.id, outcome=result.outcome, revision=result.revision, job=JobOut.of(job)
        )
        return answer(enqueued, status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    return await created_once(request, services, caller, idempotency_key, body, create)


@router.get("/v1/jobs/{jobId}", response_model=JobOut, summary="One job")
async def get_job(job_id: JobIdPath, _: AdminDep, services: ServicesDep) -> JobOut:
    return JobOut.of(await services.jobs.get(job_id))


@router.get(
    "/v1/jobs/{jobId}/attempts",
    response_model=AttemptPageOut,
    summary="The job's attempts that ended without success (failure, lease expired, cancel "
    "while running), oldest first, at most 200; an unknown job is a 404",
    responses={404: {"description": "no such job"}},
)
async def job_attempts(job_id: JobIdPath, _: AdminDep, services: ServicesDep) -> AttemptPageOut:
    await services.jobs.get(job_id)
    attempts = await services.jobs.attempts(job_id)
    return AttemptPageOut(items=[AttemptOut.of(a) for a in attempts])


@router.get(
    "/v1/jobs",
    response_model=JobPageOut,
    summary="Jobs, newest first, filtered; pass nextCursor as cursor for the next page",
    responses={422: {"description": "unknown status, malformed time or cursor"}},
)
async def list_jobs(
    _: AdminDep,
    services: ServicesDep,
    type: Annotated[str | None, Query(description="only this job type")] = None,
    job_status: Annotated[str | None, Query(alias="status", description="only this status")] = None,
    concurrency_class: Annotated[
        str | None, Query(alias="class", description="only this concurrency class")
    ] = None,
    source_key: Annotated[str | None, Query(alias="sourceKey")] = None,
    dedupe_key: Annotated[str | None, Query(alias="dedupeKey")] = None,
    created_from: Annotated[
        dt.datetime | None,
        Query(alias="createdFrom", description="created at or after (ISO 8601; naive = UTC)"),
    ] = None,
    created_to: Annotated[
        dt.datetime | None, Query(alias="createdTo", description="created before")
    ] = None,
    finished_from: Annotated[
        dt.datetime | None, Query(alias="finishedFrom", description="finished at or after")
    ] = None,
    finished_to: Annotated[
        dt.datetime | None, Query(alias="finishedTo", description="finished before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[uuid.UUID | None, Query(description="nextCursor of the last page")] = None,
) -> JobPageOut:
    job_filter = JobFilter(
        type=type,
        status=job_status,
        concurrency_class=concurrency_class,
        source_key=source_key,
        dedupe_key=dedupe_key,
        created_from=created_from,
        created_to=created_to,
        finished_from=finished_from,
        finished_to=finished_to,
    )
    page = await services.jobs.list_jobs(filter=job_filter, limit=limit, before=cursor)
    return JobPageOut(items=[JobOut.of(j) for j in page.jobs], next_cursor=page.next_before)


@router.post(
    "/v1/jobs/{jobId}/cancel",
    response_model=JobOut,
    summary="Cancel a pending or running job (a running handler is stopped)",
)
async def cancel_job(job_id: JobIdPath, _: AdminDep, services: ServicesDep) -> JobOut:
    return JobOut.of(await services.jobs.cancel(job_id))


@router.post(
    "/v1/jobs/{jobId}/retry",
    response_model=JobOut,
    summary="Put a failed or cancelled job back to pending with fresh attempts",
)
async def retry_job(job_id: JobIdPath, _: AdminDep, services: ServicesDep) -> JobOut:
    return JobOut.of(await services.jobs.retry(job_id))


@router.get(
    "/v1/jobs/{jobId}/diagnosis",
    response_model=DiagnosisOut,
    summary="Why isn't this job running? One answer from the database's state, with the "
    "blocking thing named",
    responses={404: {"description": "no such job"}},
)
async def diagnose_job(job_id: JobIdPath, _: AdminDep, services: ServicesDep) -> DiagnosisOut:
    return DiagnosisOut.of(await services.jobs.diagnose(job_id))


@router.get(
    "/v1/media/status",
    response_model=MediaStatusPage,
    summary="Per media id, the status of its newest media.process job (or none)",
)
async def media_status(
    _: AdminDep,
    services: ServicesDep,
    media_ids: Annotated[list[str], Query(alias="mediaIds[]")] = [],  # noqa: B006
    media_ids_plain: Annotated[list[str], Query(alias="mediaIds")] = [],  # noqa: B006
) -> MediaStatusPage:
    wanted = [*media_ids, *media_ids_plain]
    if not wanted:
        raise InvalidInput("no media ids", [FieldError("mediaIds[]", "give at least one")])
    if len(wanted) > 500:
        raise InvalidInput("too many media ids", [FieldError("mediaIds[]", "at most 500")])
    statuses = await services.media.media_status(wanted)
    return MediaStatusPage(
        items=[MediaStatusOut.model_validate(s, from_attributes=True) for s in statuses]
    )
