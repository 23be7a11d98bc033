"""Creating a workflow and reading it back.

`create_workflow` checks the whole workflow first (the graph, then every step's type and
payload against the registry, each error named by its path) and stores nothing when any
check fails. It then writes the workflow, one job per step and the edges in ONE
transaction (a savepoint inside the caller's, when the caller's connection has one open):
a step without dependencies is available at once, the others are held until released
(`jobs.workflows.release`). Steps are never deduplicated: a workflow owns its jobs.

`get_workflow` reads a workflow with every step; its status and counts are derived from
the steps (nothing is counted on the way, so nothing can drift).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs import JobRole
from jobrelay.ids import new_uuid
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.enqueue_row import EnqueueRow
from jobrelay.jobs.models import EnqueueRequest
from jobrelay.jobs.workflows.graph import DEFAULT_MAX_STEPS, Workflow

_QUERIES = Queries("jobrelay.jobs.workflows")
# Step states that are not ended: a workflow with one of them is still running.
ACTIVE_STATES = frozenset({"held", "pending", "in_progress"})


@dataclass(frozen=True, slots=True)
class CreatedWorkflow:
    """A stored workflow: its id and the job id of each step, by step name."""

    id: uuid.UUID
    steps: Mapping[str, uuid.UUID]


@dataclass(frozen=True, slots=True)
class StepView:
    """One step as read back: its state (`held`, `pending`, `in_progress`, `completed`,
    `failed`, `cancelled`, `skipped`), dependencies, attempts and result."""

    name: str
    job_id: uuid.UUID
    type: str
    state: str
    after: tuple[str, ...]
    on_dependency_failure: str
    attempts: int
    releases: int
    result: Mapping[str, Any] | None
    error: str | None
    finished_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A workflow with its derived status and counts and every step."""

    id: uuid.UUID
    name: str
    status: str  # running, cancelling, completed, failed, cancelled
    counts: Mapping[str, int]
    created_at: dt.datetime
    finished_at: dt.datetime | None
    cancelled_at: dt.datetime | None
    steps: tuple[StepView, ...]


async def create_workflow(
    conn: Connection,
    enqueuer: Enqueuer,
    workflow: Workflow,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> CreatedWorkflow:
    """Check and store `workflow` in `conn` (inside the caller's transaction if one is
    open: the workflow exists only if it commits). Raises `InvalidInput` naming every bad
    field (`steps.3.after.0`, `steps.1.payload.url`), `Paused` when enqueueing is paused;
    nothing is stored then."""
    errors = workflow.problems(max_steps=max_steps)
    if errors:
        raise InvalidInput("invalid workflow; nothing was stored", errors)
    workflow_id = new_uuid()
    rows: list[EnqueueRow] = []
    for i, step in enumerate(workflow.steps):
        request = EnqueueRequest(
            step.type, step.payload, priority=step.priority, max_attempts=step.max_attempts
        )
        try:
            row = enqueuer.prepare(request, path=f"steps.{i}.")
        except InvalidInput as exc:
            errors.extend(exc.errors)
            continue
        if row.job_type.role is not JobRole.JOB:
            errors.append(
                FieldError(f"steps.{i}.type", f"a {row.job_type.role} type cannot be a step")
            )
            continue
        row.dedupe_key = None
        row.workflow_id = workflow_id
        row.delay_s = 0.0 if not step.after else None  # None: held until released
        if workflow.fairness_key is not None:
            row.fairness_key = workflow.fairness_key
        rows.append(row)
    if errors:
        raise InvalidInput("invalid workflow; nothing was stored", errors)
    ids = {step.name: row.id for step, row in zip(workflow.steps, rows, strict=True)}
    edges = [(ids[up], ids[step.name]) for step in workflow.steps for up in step.after]
    async with conn.transaction():
        await conn.execute(
            _QUERIES.insert_workflow,
            {"id": workflow_id, "name": workflow.name, "fairness_key": workflow.fairness_key},
        )
        await enqueuer.insert_new(conn, rows)
        await conn.execute(
            _QUERIES.insert_steps,
            {
                "workflow_id": workflow_id,
                "job_ids": [row.id for row in rows],
                "names": [step.name for step in workflow.steps],
                "policies": [str(step.on_dependency_failure) for step in workflow.steps],
                "dependencies": [len(step.after) for step in workflow.steps],
                "upstream_ids": [up for up, _ in edges],
                "downstream_ids": [down for _, down in edges],
            },
        )
    return CreatedWorkflow(workflow_id, ids)


async def get_workflow(conn: Connection, workflow_id: uuid.UUID) -> WorkflowView | None:
    """The workflow with its steps, status and counts; None when there is none."""
    cursor = await conn.execute(_QUERIES.get_workflow, {"id": workflow_id})
    found = await cursor.fetchone()
    if found is None:
        return None
    cursor = await conn.execute(_QUERIES.workflow_steps, {"id": workflow_id})
    steps = tuple(
        StepView(
            name=str(r["name"]),
            job_id=cast(uuid.UUID, r["job_id"]),
            type=str(r["type"]),
            state=str(r["state"]),
            after=tuple(cast(list[str], r["after"])),
            on_dependency_failure=str(r["on_dependency_failure"]),
            attempts=cast(int, r["attempt_count"]),
            releases=cast(int, r["releases"]),
            result=cast(Mapping[str, Any] | None, r["result"]),
            error=cast(str | None, r["last_error"]),
            finished_at=cast(dt.datetime | None, r["finished_at"]),
        )
        for r in await cursor.fetchall()
    )
    counts = Counter(step.state for step in steps)
    cancelled_at = cast(dt.datetime | None, found["cancelled_at"])
    running = any(state in ACTIVE_STATES for state in counts)
    finished = [s.finished_at for s in steps if s.finished_at is not None]
    return WorkflowView(
        id=workflow_id,
        name=str(found["name"]),
        status=_status(counts, running=running, cancelled=cancelled_at is not None),
        counts=dict(counts),
        created_at=cast(dt.datetime, found["created_at"]),
        finished_at=None if running or not finished else max(finished),
        cancelled_at=cancelled_at,
        steps=steps,
    )


def _status(counts: Mapping[str, int], *, running: bool, cancelled: bool) -> str:
    """A workflow's status from its steps' states: running while a step is active;
    completed when every step completed or was skipped; failed when one failed or was
    cancelled (by a failed dependency or by hand); cancelled when it was cancelled."""
    if running:
        return "cancelling" if cancelled else "running"
    if cancelled:
        return "cancelled"
    if counts.get("failed") or counts.get("cancelled"):
        return "failed"
    return "completed"
