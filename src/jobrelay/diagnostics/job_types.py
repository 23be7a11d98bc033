"""Diagnostic types for benchmarks, smoke checks and the ops runbook (setting
`diag_jobs_enabled`): `diag.noop`, `diag.sleep {seconds, concurrencyClass?, sourceKey?,
fairnessKey?}`, `diag.fail {kind, times}`.

`diag.sleep` takes its concurrency class, serialization key and fairness key from the
payload, so the worker's classes, global caps, per-source serialization and fair claiming can
be exercised and measured;
its result records the handler's start and end (epoch seconds) for overlap checks.
`diag.fail` with kind `exception` raises an unexpected exception (a retryable failure).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from pydantic import Field

from jobrelay.domain.jobs import Complete, Fail, Outcome, Retry
from jobrelay.domain.jobs_config import CLASS_NAME_PATTERN
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload


class DiagNoop(JobPayload):
    model_config = JobPayload.model_config | {"extra": "allow"}  # benchmarks carry markers


class DiagSleep(JobPayload):
    seconds: float = Field(ge=0, le=3600)
    concurrency_class: str | None = Field(default=None, pattern=CLASS_NAME_PATTERN)
    source_key: str | None = Field(default=None, min_length=1, max_length=255)
    fairness_key: str | None = Field(default=None, min_length=1, max_length=255)


class DiagFail(JobPayload):
    kind: Literal["retryable", "permanent", "exception"]
    times: int = Field(default=1_000_000, ge=0, description="attempts that fail, then success")


_COMPLETE = Complete()
job_types = JobTypes()


@job_types.job_type("diag.noop")
async def noop(ctx: JobContext[DiagNoop]) -> Outcome:
    return _COMPLETE


@job_types.job_type(
    "diag.sleep",
    class_of=lambda p: p.concurrency_class,
    source_key=lambda p: p.source_key,
    fairness_key="fairnessKey",
)
async def sleep(ctx: JobContext[DiagSleep]) -> Outcome:
    started = time.time()
    await asyncio.sleep(ctx.payload.seconds)
    return Complete(
        result={"slept": ctx.payload.seconds, "startedAt": started, "endedAt": time.time()}
    )


@job_types.job_type("diag.fail", retry=RetryPolicy(max_attempts=3, base_s=0.5, cap_s=4.0))
async def fail(ctx: JobContext[DiagFail]) -> Outcome:
    attempt = ctx.job.attempt_count
    if attempt > ctx.payload.times:
        return Complete(result={"failedAttempts": ctx.payload.times})
    message = f"diag.fail attempt {attempt} ({ctx.payload.kind})"
    if ctx.payload.kind == "permanent":
        return Fail(message)
    if ctx.payload.kind == "exception":
        raise RuntimeError(f"unexpected: {message}")
    return Retry(message)
