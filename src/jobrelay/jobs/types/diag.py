"""Diagnostic types for benchmarks, smoke checks and the ops runbook (setting
`diag_jobs_enabled`): `diag.noop`, `diag.sleep {seconds, concurrencyClass?, sourceKey?}`,
`diag.fail {kind, times}`.

`diag.sleep` takes its concurrency class and serialization key from the payload, so the
worker's classes, global caps and per-source serialization can be exercised and measured;
its result records the handler's start and end (epoch seconds) for overlap checks.
`diag.fail` with kind `exception` raises an unexpected exception (a retryable failure).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from pydantic import Field

from jobrelay.domain.jobs import Complete, ConcurrencyClass, Fail, Outcome, Retry
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.registry import JobContext, JobPayload, JobType


class DiagNoop(JobPayload):
    model_config = JobPayload.model_config | {"extra": "allow"}  # benchmarks carry markers
    type: Literal["diag.noop"] = "diag.noop"


class DiagSleep(JobPayload):
    type: Literal["diag.sleep"] = "diag.sleep"
    seconds: float = Field(ge=0, le=3600)
    concurrency_class: ConcurrencyClass | None = None
    source_key: str | None = Field(default=None, min_length=1, max_length=255)


class DiagFail(JobPayload):
    type: Literal["diag.fail"] = "diag.fail"
    kind: Literal["retryable", "permanent", "exception"]
    times: int = Field(default=1_000_000, ge=0, description="attempts that fail, then success")


_COMPLETE = Complete()


async def noop(ctx: JobContext[DiagNoop]) -> Outcome:
    return _COMPLETE


async def sleep(ctx: JobContext[DiagSleep]) -> Outcome:
    started = time.time()
    await asyncio.sleep(ctx.payload.seconds)
    return Complete(
        result={"slept": ctx.payload.seconds, "startedAt": started, "endedAt": time.time()}
    )


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


def job_types() -> list[JobType[Any]]:
    return [
        JobType(name="diag.noop", payload_model=DiagNoop, handler=noop),
        JobType(
            name="diag.sleep",
            payload_model=DiagSleep,
            handler=sleep,
            class_of=lambda p: p.concurrency_class,
            source_key=lambda p: p.source_key,
        ),
        JobType(
            name="diag.fail",
            payload_model=DiagFail,
            handler=fail,
            retry=RetryPolicy(max_attempts=3, base_s=0.5, cap_s=4.0),
        ),
    ]
