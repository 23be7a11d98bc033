"""Creating a workflow and reading it back.

`create_workflow` checks the whole workflow first (the graph, then every step's type and
payload against the registry, each error named by its path) and stores nothing when any
check fails. It then writes the workflow, one job per step and the edges in ONE
transaction (a savepoint inside the caller's, when the caller's connection has one open):
a step without dependencies is available at once, the others are held until released
(`jobs.workflows.release`). Steps are never deduplicated: a workflow owns its jobs.

`get_workflow` reads a workflow, its steps counted by state and a page of its steps;
`list_workflows` pages through workflows. A status is derived from the steps by one SQL
function, `jobrelay_workflow_status_v1` (migration 0021), for both: nothing is counted on
the way, so nothing can drift.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from jobrelay.db.pool import Connection
from jobrelay.db.sql import Queries
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs import JobRole
from jobrelay.domain.retry import PermanentError
from jobrelay.ids import new_uuid
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.enqueue_row import EnqueueRow
from jobrelay.jobs.models import ClaimedJob, EnqueueRequest
from jobrelay.jobs.workflows.graph import DEFAULT_MAX_STEPS, Step, Workflow

_QUERIES = Queries("jobrelay.jobs.workflows")
# Step states that are not ended: a workflow with one of them is still running.
ACTIVE_STATES = frozenset({"held", "pending", "in_progress"})
WorkflowStatus = Literal["running", "cancelling", "completed", "failed", "cancelled"]
StepState = Literal["held", "pending", "in_progress", "completed", "failed", "cancelled", "skipped"]
WORKFLOW_STATUSES: tuple[str, ...] = get_args(WorkflowStatus)
STEPS_PAGE_MAX = 10_000
STEPS_PAGE_DEFAULT = 1_000
# Workflows whose status a list derives per page at most, when it filters by status.
LIST_SCAN_ROWS = 1_000


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
class WorkflowSummary:
    """A workflow as a list shows it: its row, its derived status and its size."""

    id: uuid.UUID
    name: str
    status: str  # running, cancelling, completed, failed, cancelled
    fairness_key: str | None
    created_at: dt.datetime
    cancelled_at: dt.datetime | None
    cancelled_by: str | None
    retried_at: dt.datetime | None
    retried_by: str | None
    retries: int
    step_count: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any], step_count: int) -> WorkflowSummary:
        """The summary of a `workflows` row read with its status."""
        return cls(
            id=cast(uuid.UUID, row["id"]),
            name=str(row["name"]),
            status=str(row["status"]),
            fairness_key=cast(str | None, row["fairness_key"]),
            created_at=cast(dt.datetime, row["created_at"]),
            cancelled_at=cast(dt.datetime | None, row["cancelled_at"]),
            cancelled_by=cast(str | None, row["cancelled_by"]),
            retried_at=cast(dt.datetime | None, row["retried_at"]),
            retried_by=cast(str | None, row["retried_by"]),
            retries=cast(int, row["retries"]),
            step_count=step_count,
        )


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A workflow with its derived status, its steps counted by state, when it finished
    (None while it runs) and one page of its steps by name (`next_step` the cursor of the
    next page, None on the last)."""

    workflow: WorkflowSummary
    counts: Mapping[str, int]
    finished_at: dt.datetime | None
    steps: tuple[StepView, ...]
    next_step: str | None

    @property
    def id(self) -> uuid.UUID:
        return self.workflow.id

    @property
    def status(self) -> str:
        return self.workflow.status


@dataclass(frozen=True, slots=True)
class WorkflowPage:
    """A page of workflows, newest first; `next_before` the cursor of the next page."""

    workflows: tuple[WorkflowSummary, ...]
    next_before: uuid.UUID | None


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
    rows = _step_rows(enqueuer, workflow_id, workflow.steps, workflow.fairness_key)
    ids = {step.name: row.id for step, row in zip(workflow.steps, rows, strict=True)}
    for step, row in zip(workflow.steps, rows, strict=True):
        row.delay_s = 0.0 if not step.after else None  # None: held until released
    edges = [(ids[up], ids[step.name]) for step in workflow.steps for up in step.after]
    async with conn.transaction():
        await conn.execute(
            _QUERIES.insert_workflow,
            {"id": workflow_id, "name": workflow.name, "fairness_key": workflow.fairness_key},
        )
        await _insert_steps(
            conn,
            enqueuer,
            workflow_id,
            list(zip(workflow.steps, rows, strict=True)),
            [len(step.after) for step in workflow.steps],
            edges,
        )
    return CreatedWorkflow(workflow_id, ids)


async def add_steps(
    conn: Connection,
    adding: ClaimedJob,
    steps: Sequence[Step],
    then: Sequence[str] = (),
    *,
    enqueuer: Enqueuer,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> dict[str, uuid.UUID]:
    """Fan-out at run time: add `steps` to the workflow of the step `adding`, in the
    transaction that completes it (its `Complete(outputs=...)`). Each new step runs after
    `adding` and after the new steps its `after` names; every step named in `then` (a
    held step that waits on `adding`) waits for all of them too. An empty `steps` changes
    nothing: `then` is released as it would be. Raises `FanOutRefused` (a permanent
    failure of `adding`, nothing added) for a bad step, a cycle, a name the workflow has,
    a `then` that is not a held dependent of `adding`, or a workflow over `max_steps`.
    Returns the new steps' job ids by name."""
    workflow_id = adding.workflow_id
    if workflow_id is None:
        raise FanOutRefused(f"job {adding.id} is no workflow step: it cannot add steps")
    if not steps:
        return {}
    problems = Workflow("fan-out", steps=list(steps)).problems(max_steps=max_steps)
    cursor = await conn.execute(
        _QUERIES.fan_out_context,
        {
            "workflow_id": workflow_id,
            "adding": adding.id,
            "names": [step.name for step in steps],
            "then": list(then),
        },
    )
    context = await cursor.fetchone()
    assert context is not None
    if context["cancelled"]:
        return {}
    taken = set(cast(list[str], context["taken"]))
    problems.extend(
        FieldError(f"steps.{i}.name", f"the workflow has a step named {step.name!r}")
        for i, step in enumerate(steps)
        if step.name in taken
    )
    held = set(cast(list[str], context["held_dependents"]))
    problems.extend(
        FieldError(f"then.{i}", f"{name!r} is not a held step waiting on this step")
        for i, name in enumerate(then)
        if name not in held
    )
    total = cast(int, context["step_count"]) + len(steps)
    if total > max_steps:
        problems.append(
            FieldError(
                "steps", f"{total} steps; the limit is {max_steps} (JOBRELAY_WORKFLOWS_MAX_STEPS)"
            )
        )
    if problems:
        raise FanOutRefused(str(InvalidInput("the steps cannot be added", problems)))
    try:
        rows = _step_rows(enqueuer, workflow_id, steps, cast(str | None, context["fairness_key"]))
    except InvalidInput as exc:
        raise FanOutRefused(str(exc)) from None
    ids = {step.name: row.id for step, row in zip(steps, rows, strict=True)}
    then_ids = cast(list[uuid.UUID], context["then_ids"])
    edges = [(adding.id, row.id) for row in rows]
    edges += [(ids[up], ids[step.name]) for step in steps for up in step.after]
    edges += [(row.id, target) for row in rows for target in then_ids]
    async with conn.transaction():
        await _insert_steps(
            conn,
            enqueuer,
            workflow_id,
            list(zip(steps, rows, strict=True)),
            [1 + len(step.after) for step in steps],  # `adding`'s end releases them
            edges,
        )
        await conn.execute(_QUERIES.add_dependencies, {"ids": then_ids, "added": len(steps)})
    return ids


class FanOutRefused(PermanentError):
    """Steps added at run time were refused: the adding step fails, nothing is added."""


def _step_rows(
    enqueuer: Enqueuer,
    workflow_id: uuid.UUID,
    steps: Sequence[Step],
    fairness_key: str | None,
) -> list[EnqueueRow]:
    """The job rows of `steps`, held (released by `jobs.workflows.release`), each checked
    against its type; raises `InvalidInput` naming every bad field (`steps.1.payload.url`)."""
    errors: list[FieldError] = []
    rows: list[EnqueueRow] = []
    for i, step in enumerate(steps):
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
        row.delay_s = None  # held until released
        if fairness_key is not None:
            row.fairness_key = fairness_key
        rows.append(row)
    if errors:
        raise InvalidInput("invalid workflow; nothing was stored", errors)
    return rows


async def _insert_steps(
    conn: Connection,
    enqueuer: Enqueuer,
    workflow_id: uuid.UUID,
    steps: Sequence[tuple[Step, EnqueueRow]],
    dependencies: Sequence[int],
    edges: Sequence[tuple[uuid.UUID, uuid.UUID]],
) -> None:
    await enqueuer.insert_new(conn, [row for _, row in steps])
    await conn.execute(
        _QUERIES.insert_steps,
        {
            "workflow_id": workflow_id,
            "job_ids": [row.id for _, row in steps],
            "names": [step.name for step, _ in steps],
            "policies": [str(step.on_dependency_failure) for step, _ in steps],
            "dependencies": list(dependencies),
            "upstream_ids": [up for up, _ in edges],
            "downstream_ids": [down for _, down in edges],
        },
    )


async def get_workflow(
    conn: Connection,
    workflow_id: uuid.UUID,
    *,
    step_limit: int = STEPS_PAGE_MAX,
    after_step: str | None = None,
) -> WorkflowView | None:
    """The workflow with its status, its steps counted by state and the page of at most
    `step_limit` steps named after `after_step` (0: no steps, the cheapest read of a
    status); None when there is none."""
    cursor = await conn.execute(_QUERIES.get_workflow, {"id": workflow_id})
    found = await cursor.fetchone()
    if found is None:
        return None
    cursor = await conn.execute(_QUERIES.step_counts, {"id": workflow_id})
    tallies = await cursor.fetchall()
    counts = {str(r["state"]): cast(int, r["steps"]) for r in tallies}
    steps: list[StepView] = []
    if step_limit > 0:  # 0: the status and counts alone
        cursor = await conn.execute(
            _QUERIES.workflow_steps,
            {"id": workflow_id, "after": after_step, "limit": step_limit + 1},
        )
        steps = [_step(r) for r in await cursor.fetchall()]
    more = len(steps) > step_limit
    steps = steps[:step_limit]
    running = any(state in ACTIVE_STATES for state in counts)
    ends = [cast(dt.datetime, r["last_finished_at"]) for r in tallies if r["last_finished_at"]]
    return WorkflowView(
        workflow=WorkflowSummary.from_row(found, sum(counts.values())),
        counts=counts,
        finished_at=None if running or not ends else max(ends),
        steps=tuple(steps),
        next_step=steps[-1].name if more and steps else None,
    )


async def list_workflows(
    conn: Connection,
    *,
    status: str | None = None,
    name: str | None = None,
    limit: int = 50,
    before: uuid.UUID | None = None,
) -> WorkflowPage:
    """Workflows newest first, by status and name when given, after the cursor `before`.
    A status filter derives the statuses of at most `LIST_SCAN_ROWS` workflows a page: a
    page may then come back short with a cursor to go on from."""
    if status is not None and status not in WORKFLOW_STATUSES:
        raise InvalidInput(
            "unknown workflow status",
            [FieldError("status", f"must be one of {', '.join(WORKFLOW_STATUSES)}")],
        )
    scan = limit if status is None else max(limit, LIST_SCAN_ROWS)
    cursor = await conn.execute(
        _QUERIES.list_workflows, {"name": name, "before": before, "scan": scan}
    )
    rows = await cursor.fetchall()
    found = [
        WorkflowSummary.from_row(r, cast(int, r["step_count"]))
        for r in rows
        if status is None or r["status"] == status
    ][:limit]
    if len(found) == limit:
        next_before: uuid.UUID | None = found[-1].id
    elif len(rows) == scan:
        next_before = cast(uuid.UUID, rows[-1]["id"])
    else:
        next_before = None
    return WorkflowPage(tuple(found), next_before)


def _step(row: Mapping[str, Any]) -> StepView:
    return StepView(
        name=str(row["name"]),
        job_id=cast(uuid.UUID, row["job_id"]),
        type=str(row["type"]),
        state=str(row["state"]),
        after=tuple(cast(list[str], row["after"])),
        on_dependency_failure=str(row["on_dependency_failure"]),
        attempts=cast(int, row["attempt_count"]),
        releases=cast(int, row["releases"]),
        result=cast(Mapping[str, Any] | None, row["result"]),
        error=cast(str | None, row["last_error"]),
        finished_at=cast(dt.datetime | None, row["finished_at"]),
    )
