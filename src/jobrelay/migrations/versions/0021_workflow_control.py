"""Workflows (issue 42, part 1): cancel, retry, lists and retention.

- `workflows.retried_at` / `retried_by` / `retries`: the last retry and who asked for it
  (a cancel already has `cancelled_at` / `cancelled_by`, now indexed for the backstop
  that ends the steps a cancel could not reach at once).
- `workflow_steps` with fillfactor 70: the counters' updates stay HOT.
- `jobrelay_workflow_status_v1(workflows)`: the one derivation of a workflow's status from
  its steps, for a read and for lists alike: `running` while a step is in `jobs` (held,
  pending or running), `cancelling` when it is so after a cancel; then `cancelled` when a
  cancel ended a step, `failed` when a step failed or was cancelled by a failed
  dependency, else `completed` (skipped steps count as ended well). Each test reads the
  steps' jobs through the workflow_id indexes and probes a step by its primary key, so no
  row estimate can plan a scan per step.
  Lists read workflows newest first through `workflows_created_idx` and derive each
  page's statuses (an index probe or two a row).

Expand only: new nullable columns and a function.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-08
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE workflows
    ADD COLUMN retried_at timestamptz,
    ADD COLUMN retried_by text,
    ADD COLUMN retries integer NOT NULL DEFAULT 0;
-- A step's row is updated once per ending dependency and once per release: room left on
-- each page keeps those updates HOT (no index entry per update), where a workflow's rows,
-- written together, would otherwise fill their pages.
ALTER TABLE workflow_steps SET (fillfactor = 70);
-- The maintenance's backstop of a cancel reads cancelled workflows only.
CREATE INDEX workflows_cancelled_idx ON workflows (cancelled_at) WHERE cancelled_at IS NOT NULL;

CREATE FUNCTION jobrelay_workflow_status_v1(workflow workflows)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = workflow.id)
            THEN CASE WHEN workflow.cancelled_at IS NULL THEN 'running' ELSE 'cancelling' END
        WHEN workflow.cancelled_at IS NOT NULL AND EXISTS (
            SELECT 1
            FROM finished_jobs AS step_job
            WHERE step_job.workflow_id = workflow.id
                AND step_job.status = 'cancelled'
                AND NOT EXISTS (
                    SELECT 1
                    FROM workflow_steps AS step
                    WHERE step.job_id = step_job.id AND step.skipped
                )
        ) THEN 'cancelled'
        WHEN EXISTS (
            SELECT 1
            FROM finished_jobs AS step_job
            WHERE step_job.workflow_id = workflow.id
                AND step_job.status IN ('failed', 'cancelled')
                AND NOT EXISTS (
                    SELECT 1
                    FROM workflow_steps AS step
                    WHERE step.job_id = step_job.id AND step.skipped
                )
        ) THEN 'failed'
        ELSE 'completed'
    END
$$;
"""

DOWNGRADE = """
DROP FUNCTION jobrelay_workflow_status_v1(workflows);
DROP INDEX workflows_cancelled_idx;
ALTER TABLE workflow_steps RESET (fillfactor);
ALTER TABLE workflows
    DROP COLUMN retried_at,
    DROP COLUMN retried_by,
    DROP COLUMN retries;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
