"""Job types for the workflow suites (`jobrelay worker --app tests.apps.steps:job_types`):
`wf.emit` returns its value, `wf.sum` adds up its dependencies' values and records what it
saw (its first attempt may be held up, for a kill), `wf.fail` fails permanently, `wf.flaky`
fails permanently until a test creates the table `wf_fixed`, and `wf.split` adds `count`
`wf.emit` steps to its workflow (a fan-out) that the steps named in `then` wait for. Each
run is recorded in `wf_runs` when a test created that table, so a test counts runs per
step from an audit, not from end states."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel, Field

from jobrelay import Complete, Fail, JobContext, JobPayload, JobTypes, Outcome
from jobrelay.jobs.workflows.graph import Step

job_types = JobTypes()


class Emit(JobPayload):
    value: int = 0
    sleep_s: float = 0.0  # every attempt runs this long (a crash test's steps take time)


class Sum(JobPayload):
    hold_s: float = 0.0  # on its first attempt, run this long (a worker can be killed meanwhile)


class Fails(JobPayload):
    message: str = "this step fails"


class Split(JobPayload):
    count: int = 0
    value: int = 1
    then: list[str] = Field(default_factory=list)
    prefix: str = "page"
    hold_s: float = 0.0  # each added step's hold on its first attempt (wf.sum when > 0)
    sleep_s: float = 0.0  # each added wf.emit step's run time


async def _table_exists(ctx: JobContext[Any], name: str) -> bool:
    assert ctx.pool is not None
    async with ctx.pool.connection() as conn:
        cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (name,))
        found = await cursor.fetchone()
    return bool(found is not None and found["found"])


async def _record(ctx: JobContext[Any], seen: dict[str, Any]) -> None:
    assert ctx.pool is not None
    if await _table_exists(ctx, "wf_runs"):
        async with ctx.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO wf_runs (job_id, attempt, seen) VALUES (%s, %s, %s::jsonb)",
                (ctx.job.id, ctx.job.attempt_count, json.dumps(seen)),
            )


@job_types.job_type("wf.emit")
async def emit(ctx: JobContext[Emit]) -> Outcome:
    await _record(ctx, {})
    if ctx.payload.sleep_s:
        await asyncio.sleep(ctx.payload.sleep_s)
    return Complete(result={"value": ctx.payload.value})


class Value(BaseModel):
    """The result of a step as `wf.sum` reads it (`DependencyResult.result_as`)."""

    value: int = 0


@job_types.job_type("wf.sum")
async def add_up(ctx: JobContext[Sum]) -> Outcome:
    dependencies = await ctx.dependency_results()
    seen = {name: d.status for name, d in dependencies.items()}
    await _record(ctx, seen)
    if ctx.job.attempt_count == 1 and ctx.payload.hold_s:
        await asyncio.sleep(ctx.payload.hold_s)
    total = sum(d.result_as(Value).value for d in dependencies.values() if d.status == "completed")
    return Complete(result={"value": total, "seen": seen})


@job_types.job_type("wf.fail")
async def fails(ctx: JobContext[Fails]) -> Outcome:
    await _record(ctx, {})
    return Fail(ctx.payload.message)


@job_types.job_type("wf.flaky")
async def flaky(ctx: JobContext[Emit]) -> Outcome:
    await _record(ctx, {})
    if not await _table_exists(ctx, "wf_fixed"):
        return Fail("not fixed yet")
    return Complete(result={"value": ctx.payload.value})


@job_types.job_type("wf.split")
async def split(ctx: JobContext[Split]) -> Outcome:
    await _record(ctx, {})
    p = ctx.payload
    added = [
        Step(f"{p.prefix}-{i}", "wf.emit", {"value": p.value, "sleep_s": p.sleep_s})
        if not p.hold_s
        else Step(f"{p.prefix}-{i}", "wf.sum", {"hold_s": p.hold_s})
        for i in range(p.count)
    ]
    return Complete(result={"added": p.count}, outputs=ctx.fan_out(added, then=p.then))
