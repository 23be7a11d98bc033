"""The workflows a deployment's API and CLI act on: create, read, list, cancel, retry.

A thin layer over `store` and `control` that owns the pool, the enqueuer and the size
limit (`JOBRELAY_WORKFLOWS_MAX_STEPS`); every method is one unit of work.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection
from jobrelay.domain.errors import NotFound
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.workflows import control, store
from jobrelay.jobs.workflows.graph import DEFAULT_MAX_STEPS, Workflow
from jobrelay.jobs.workflows.store import CreatedWorkflow, WorkflowPage, WorkflowView


@dataclass
class WorkflowsService:
    """Workflows on one pool; `max_steps` bounds a workflow's size."""

    pool: AsyncConnectionPool[Connection]
    enqueuer: Enqueuer
    max_steps: int = DEFAULT_MAX_STEPS

    async def create(
        self, workflow: Workflow, *, conn: Connection | None = None
    ) -> CreatedWorkflow:
        """Check and store `workflow` (in `conn`'s transaction when given); raises
        `InvalidInput` naming every bad field, and stores nothing then."""
        if conn is not None:
            return await store.create_workflow(
                conn, self.enqueuer, workflow, max_steps=self.max_steps
            )
        async with self.pool.connection() as own:
            return await store.create_workflow(
                own, self.enqueuer, workflow, max_steps=self.max_steps
            )

    async def get(
        self,
        workflow_id: uuid.UUID,
        *,
        step_limit: int = store.STEPS_PAGE_DEFAULT,
        after_step: str | None = None,
        conn: Connection | None = None,
    ) -> WorkflowView:
        """The workflow with a page of its steps; `NotFound` when there is none."""
        if conn is not None:
            view = await store.get_workflow(
                conn, workflow_id, step_limit=step_limit, after_step=after_step
            )
        else:
            async with self.pool.connection() as own:
                view = await store.get_workflow(
                    own, workflow_id, step_limit=step_limit, after_step=after_step
                )
        if view is None:
            raise NotFound(f"no workflow {workflow_id}")
        return view

    async def list(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: uuid.UUID | None = None,
    ) -> WorkflowPage:
        """Workflows newest first (see `store.list_workflows`)."""
        async with self.pool.connection() as conn:
            return await store.list_workflows(
                conn, status=status, name=name, limit=limit, before=before
            )

    async def cancel(self, workflow_id: uuid.UUID, *, actor: str) -> WorkflowView:
        """Cancel the workflow (`control.cancel_workflow`) and read it back."""
        async with self.pool.connection() as conn:
            await control.cancel_workflow(conn, workflow_id, actor=actor)
            return await self.get(workflow_id, conn=conn)

    async def retry(self, workflow_id: uuid.UUID, *, actor: str) -> WorkflowView:
        """Retry the workflow (`control.retry_workflow`) and read it back."""
        async with self.pool.connection() as conn:
            await control.retry_workflow(conn, workflow_id, actor=actor)
            return await self.get(workflow_id, conn=conn)
