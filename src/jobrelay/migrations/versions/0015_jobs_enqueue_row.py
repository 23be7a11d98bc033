"""The row an enqueue writes, defined once: `jobrelay_job_input_v1`,
`jobrelay_job_available_at_v1` and `jobrelay_job_list_v1`.

`jobrelay_job_input_v1` is the composite type of one job as the engine sends it (the fields
of `jobs/enqueue.py` `_NAMES`, in that order): every enqueue statement that reads a JSON
document unpacks it with `jsonb_populate_recordset(NULL::jobrelay_job_input_v1, ...)`
instead of repeating the column list. `jobrelay_job_available_at_v1(run_at, delay_s)` is when
such a job becomes available: `run_at` if given, else now (database time) plus the delay,
else (no delay: a parent waiting for its children) the end of time, not 'infinity', which
Python's datetime cannot hold. `jobrelay_job_list_v1(payload, field)` is the list a merge
unions (`payload -> field`; missing, null or not a list: empty). Plain SQL functions,
inlined by the planner.

Only new objects (expand): a process of the previous release runs its own statements
against this schema unchanged. A new field is a new version (`_v2`) beside this one.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE TYPE jobrelay_job_input_v1 AS (
    id uuid,
    type text,
    payload jsonb,
    dedupe_key text,
    revision bigint,
    source_key text,
    concurrency_class text,
    priority smallint,
    max_attempts integer,
    delay_s float8,
    parent_id uuid,
    role text,
    run_at timestamptz,
    fairness_key text
)
"""
    )
    op.execute(
        """
CREATE FUNCTION jobrelay_job_available_at_v1(run_at timestamptz, delay_s float8)
RETURNS timestamptz
LANGUAGE sql
VOLATILE
AS $$
    SELECT coalesce(
        run_at,
        clock_timestamp() + make_interval(secs => delay_s),
        '9999-12-31 00:00:00+00'::timestamptz
    )
$$
"""
    )

    op.execute(
        """
CREATE FUNCTION jobrelay_job_list_v1(payload jsonb, field text)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE jsonb_typeof(payload -> field) WHEN 'array' THEN payload -> field ELSE '[]' END
$$
"""
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION jobrelay_job_list_v1(jsonb, text)")
    op.execute("DROP FUNCTION jobrelay_job_available_at_v1(timestamptz, float8)")
    op.execute("DROP TYPE jobrelay_job_input_v1")
