"""W3C trace context in the rows that carry work across processes (issue 25, traces):
`jobs.traceparent`, `finished_jobs.traceparent`, `batch.traceparent`, and
`jobrelay_job_input_v2`, the enqueue row with the new field.

A job's `traceparent` is the context of the span that enqueued it (an API request, a
handler that enqueued a child, a schedule's tick); the worker starts the claim and the run
spans of every attempt under it, so a trace follows a job from the request that made it to
its end. A batch's is the context of its POST; the relay sends each item under it and puts
its send span's context in the SQS message attributes. NULL when tracing was off: the
worker and the relay then start a new trace if they trace at all. `finished_jobs` keeps the
column (finishing statements copy every column through `jobrelay_finished_job_v1`, by
name), and `all_jobs` lists it last.

`jobrelay_job_input_v2` is `jobrelay_job_input_v1` plus `traceparent`, last. Expand only:
nullable columns without a default (no table rewrite), `_v1` stays, so a process of the
previous release runs its own statements unchanged (its jobs have no trace context).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE jobs ADD COLUMN traceparent text;
ALTER TABLE finished_jobs ADD COLUMN traceparent text;
ALTER TABLE batch ADD COLUMN traceparent text;
COMMENT ON COLUMN jobs.traceparent IS
    'W3C traceparent of the span that enqueued the job (NULL: not traced); the parent of '
    'its claim and run spans.';
COMMENT ON COLUMN batch.traceparent IS
    'W3C traceparent of the request that created the batch (NULL: not traced); the parent '
    'of the relay''s send span of each item.';

CREATE TYPE jobrelay_job_input_v2 AS (
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
    fairness_key text,
    traceparent text
);
"""


def _columns(table: str) -> list[str]:
    rows = op.get_bind().execute(
        sa.text(
            "SELECT attname FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ),
        {"t": table},
    )
    return [str(r[0]) for r in rows]


def _all_jobs(columns: list[str]) -> str:
    listed = ", ".join(f'"{c}"' for c in columns)
    return f"SELECT {listed} FROM jobs UNION ALL SELECT {listed} FROM finished_jobs"  # noqa: S608


def upgrade() -> None:
    op.execute(UPGRADE)
    # The columns of `jobs` in its order: traceparent, added last, comes last in the view
    # too, which CREATE OR REPLACE VIEW allows (readers name their columns).
    op.execute(f"CREATE OR REPLACE VIEW all_jobs AS {_all_jobs(_columns('jobs'))}")


def downgrade() -> None:
    columns = [c for c in _columns("jobs") if c != "traceparent"]
    op.execute("DROP VIEW all_jobs")
    op.execute(f"CREATE VIEW all_jobs AS {_all_jobs(columns)}")
    op.execute(
        "COMMENT ON VIEW all_jobs IS 'Every job: the active ones (jobs) and the finished "
        "ones (finished_jobs).'"
    )
    op.execute(
        """
DROP TYPE jobrelay_job_input_v2;
ALTER TABLE batch DROP COLUMN traceparent;
ALTER TABLE finished_jobs DROP COLUMN traceparent;
ALTER TABLE jobs DROP COLUMN traceparent;
"""
    )
