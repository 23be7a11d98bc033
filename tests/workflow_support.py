"""Helpers of the workflow suites: create a workflow of the `tests.apps.steps` types, read
it, run an in-process worker over it and wait for it to end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.worker import Worker, WorkerConfig
from jobrelay.jobs.workflows.graph import Workflow
from jobrelay.jobs.workflows.store import (
    CreatedWorkflow,
    StepView,
    WorkflowView,
    create_workflow,
    get_workflow,
)
from tests.apps.steps import job_types as step_types
from tests.jobs_support import build_registry, eventually

Pool = AsyncConnectionPool[Connection]
REGISTRY = build_registry(extra=step_types)
ENQUEUER = Enqueuer(REGISTRY, payload_limit_bytes=256 * 1024)


async def create(pool: Pool, workflow: Workflow) -> CreatedWorkflow:
    async with pool.connection() as conn:
        return await create_workflow(conn, ENQUEUER, workflow)


async def view_of(pool: Pool, workflow_id: uuid.UUID) -> WorkflowView:
    async with pool.connection() as conn:
        view = await get_workflow(conn, workflow_id)
    assert view is not None
    return view


@asynccontextmanager
async def worker(pool: Pool, **config: Any) -> AsyncIterator[Worker]:
    running = Worker(
        pool=pool,
        registry=REGISTRY,
        config=WorkerConfig(
            **{"concurrency": 4, "poll_interval_s": 0.01, "lease_s": 10.0, **config}
        ),
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def ended(pool: Pool, workflow_id: uuid.UUID) -> WorkflowView:
    async def probe() -> WorkflowView | None:
        view = await view_of(pool, workflow_id)
        return view if view.status not in ("running", "cancelling") else None

    return await eventually(probe, timeout_s=60, what=f"workflow {workflow_id} to end")


def steps_of(view: WorkflowView) -> dict[str, StepView]:
    return {step.name: step for step in view.steps}
