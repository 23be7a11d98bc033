"""Workflows (issue 42, part 1): a DAG of steps, each step a job, released by the
transaction that ends its last dependency.

- `workflows`: one row per workflow (name, the fairness key its steps inherit, when it was
  created and cancelled, by whom). Its status and counts are derived from its steps.
- `workflow_steps`: one row per step, keyed by its job: its name in the workflow, what it
  does when a dependency fails (`cancel`, `skip`, `run`), the dependencies not ended yet
  (`dependencies_left`, the counter a release decrements: O(1) per ending dependency,
  whatever the fan-in) and those that failed, whether it was skipped, and `releases`, how
  often it was released (the audit a test checks: exactly once).
- `workflow_edges`: upstream -> downstream, keyed by the upstream, so ending a step reads
  only its own outgoing edges through the primary key.
- `jobs.workflow_id` / `finished_jobs.workflow_id` (through `job_columns.add_job_column`)
  and `jobrelay_job_input_v3` (v2 plus `workflow_id`): steps are enqueued like other jobs.
  A held step is pending at 9999-12-31, outside every claim's range, like a waiting parent.
- `jobrelay_finished_job_v1` keeps a step's finished row without a purge day (kept until
  its workflow is pruned), so a dependent never waits on a step that retention removed.

Expand only: new tables, a nullable column, a new type; v2 stays for the previous release.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from alembic import op

from jobrelay.migrations import job_columns

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE workflows (
    id            uuid PRIMARY KEY,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    fairness_key  text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    cancelled_at  timestamptz,
    cancelled_by  text
);
CREATE INDEX workflows_created_idx ON workflows (created_at DESC, id DESC);
CREATE INDEX workflows_name_created_idx ON workflows (name, created_at DESC, id DESC);
COMMENT ON TABLE workflows IS
    'A DAG of steps (workflow_steps), each a job; status and counts derive from the steps.';

CREATE TABLE workflow_steps (
    job_id                 uuid PRIMARY KEY,
    workflow_id            uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    name                   text NOT NULL,
    on_dependency_failure  text NOT NULL DEFAULT 'cancel'
                           CHECK (on_dependency_failure IN ('cancel', 'skip', 'run')),
    dependencies_left      integer NOT NULL CHECK (dependencies_left >= 0),
    dependencies_failed    integer NOT NULL DEFAULT 0 CHECK (dependencies_failed >= 0),
    skipped                boolean NOT NULL DEFAULT false,
    releases               integer NOT NULL DEFAULT 0,
    UNIQUE (workflow_id, name)
);
COMMENT ON COLUMN workflow_steps.dependencies_left IS
    'Dependencies not ended yet; the step is released when the last one ends.';
COMMENT ON COLUMN workflow_steps.releases IS
    'How often the step was released (an audit: a release happens once).';

CREATE TABLE workflow_edges (
    upstream_id    uuid NOT NULL REFERENCES workflow_steps (job_id) ON DELETE CASCADE,
    downstream_id  uuid NOT NULL REFERENCES workflow_steps (job_id) ON DELETE CASCADE,
    PRIMARY KEY (upstream_id, downstream_id)
);
CREATE INDEX workflow_edges_downstream_idx ON workflow_edges (downstream_id);
"""

# The finished row of a job as in 0017, but a workflow step gets no purge day: it is kept
# while its workflow exists (and goes with it), whatever the retention of its type.
FINISHED_JOB = """
CREATE OR REPLACE FUNCTION jobrelay_finished_job_v1(job jobs, changes jsonb)
RETURNS finished_jobs
LANGUAGE sql
VOLATILE
AS $$
    SELECT jsonb_populate_record(NULL::finished_jobs, merged || jsonb_build_object(
        'purge_on', {purge_on}
    ))
    FROM (
        SELECT to_jsonb(job) || ending.columns || changes AS merged
        FROM (
            SELECT CASE
                WHEN job.finished_at IS NULL THEN jsonb_build_object(
                    'finished_at', clock_timestamp(),
                    'updated_at', clock_timestamp(),
                    'claim_token', NULL,
                    'lease_expires_at', NULL
                )
                ELSE '{}'::jsonb
            END AS columns
        ) AS ending
    ) AS row_changes
$$;
"""
PURGE_ON = "jobrelay_job_purge_on_v1(merged ->> 'type', (merged ->> 'finished_at')::timestamptz)"
STEP_PURGE_ON = f"CASE WHEN merged ->> 'workflow_id' IS NULL THEN {PURGE_ON} END"


def upgrade() -> None:
    op.execute(UPGRADE)
    job_columns.add_job_column(
        "workflow_id", "uuid", comment="The workflow this job is a step of (NULL: none)."
    )
    job_columns.create_input_type(
        "jobrelay_job_input_v3", base="jobrelay_job_input_v2", added=[("workflow_id", "uuid")]
    )
    op.execute(
        "CREATE INDEX jobs_workflow_id_idx ON jobs (workflow_id) WHERE workflow_id IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX finished_jobs_workflow_id_idx ON finished_jobs (workflow_id) "
        "WHERE workflow_id IS NOT NULL"
    )
    op.execute(FINISHED_JOB.replace("{purge_on}", STEP_PURGE_ON))


def downgrade() -> None:
    op.execute(FINISHED_JOB.replace("{purge_on}", PURGE_ON))
    op.execute("DROP TYPE jobrelay_job_input_v3")
    job_columns.drop_job_column("workflow_id")
    op.execute("DROP TABLE workflow_edges, workflow_steps, workflows")
