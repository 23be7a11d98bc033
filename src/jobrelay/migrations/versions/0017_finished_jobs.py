"""Finished jobs leave `jobs`: `finished_jobs`, partitioned by purge day; `all_jobs`;
per-type retention in `job_retention` (issue 27).

`jobs` keeps only active jobs (pending, in_progress), so its indexes, its dead row versions
and every claim stay the size of the active queue however many finished jobs are kept. The
statement that ends a job deletes its row from `jobs` and inserts the finished row into
`finished_jobs` (one statement: a reader sees the job in exactly one table), built by
`jobrelay_finished_job_v1(job, changes)`.

`finished_jobs` has the columns of `jobs` plus `purge_on`, the UTC day after which the row
may go: finish time plus the retention of its type (`job_retention`, `*` is the default;
NULL retention keeps forever). It is range-partitioned by `purge_on`, one partition per day
(`finished_jobs_pYYYYMMDD`, created ahead by the pruner), so retention drops whole
partitions instead of deleting rows; `finished_jobs_default` takes rows kept forever and
any row whose day has no partition yet (the pruner deletes those row by row when due).

`all_jobs` is every job, active or finished: the view readers use (API, console, diagnosis,
parents). The parent foreign key goes: a child may end before or after its parent, in
either table; finished rows are pruned by partition, not by cascade.

Finished rows already in `jobs` stay readable through `all_jobs` and are moved in batches by
the pruner or `jobrelay ops move-finished` (online, resumable; count and checksum checked).
Expand only, apart from the foreign key: a process of the previous release finishes jobs in
place, and those rows are moved like the old ones.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE jobs DROP CONSTRAINT jobs_parent_id_fkey;

CREATE TABLE job_retention (
    type         text PRIMARY KEY,
    retention_s  bigint CHECK (retention_s > 0),
    updated_at   timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP
);
COMMENT ON TABLE job_retention IS
    'How long finished jobs of a type are kept (NULL: forever); type * is the default. '
    'Written by the pruner from its settings; read when a job finishes.';
INSERT INTO job_retention (type, retention_s) VALUES ('*', 604800);

CREATE TABLE finished_jobs (
    LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    purge_on date,
    CONSTRAINT finished_jobs_status_finished
        CHECK (status IN ('completed', 'failed', 'cancelled'))
) PARTITION BY RANGE (purge_on);
CREATE TABLE finished_jobs_default PARTITION OF finished_jobs DEFAULT;
CREATE INDEX finished_jobs_default_purge_on_idx ON finished_jobs_default (purge_on)
    WHERE purge_on IS NOT NULL;

CREATE INDEX finished_jobs_id_idx ON finished_jobs (id);
CREATE INDEX finished_jobs_parent_id_idx ON finished_jobs (parent_id)
    WHERE parent_id IS NOT NULL;
CREATE INDEX finished_jobs_type_status_idx ON finished_jobs (type, status, id);
CREATE INDEX finished_jobs_finished_at_idx ON finished_jobs (finished_at);
CREATE INDEX finished_jobs_unsuccessful_idx ON finished_jobs (status, id)
    WHERE status IN ('failed', 'cancelled');
CREATE INDEX finished_jobs_dedupe_key_idx ON finished_jobs (dedupe_key, id)
    WHERE dedupe_key IS NOT NULL;
CREATE INDEX finished_jobs_source_key_idx ON finished_jobs (source_key, id)
    WHERE source_key IS NOT NULL;
CREATE INDEX finished_jobs_class_idx ON finished_jobs (concurrency_class, id)
    WHERE concurrency_class <> 'default';

CREATE FUNCTION jobrelay_job_purge_on_v1(job_type text, finished_at timestamptz)
RETURNS date
LANGUAGE sql
STABLE
AS $$
    SELECT ((finished_at + make_interval(secs => kept.retention_s)) AT TIME ZONE 'UTC')::date
    FROM (
        SELECT retention_s
        FROM job_retention
        WHERE type IN (job_type, '*')
        ORDER BY type = '*'
        LIMIT 1
    ) AS kept
$$;

-- The finished row of a job: its columns; for an active job (finished_at not set) also
-- finished_at and updated_at now and no claim; then `changes` (status, failure_kind,
-- last_error, result, ...); then its purge day. A job finished in place before this
-- migration keeps every column. Through jsonb so that one function serves every
-- finishing statement and a column added to both tables later needs no change here.
CREATE FUNCTION jobrelay_finished_job_v1(job jobs, changes jsonb)
RETURNS finished_jobs
LANGUAGE sql
VOLATILE
AS $$
    SELECT jsonb_populate_record(NULL::finished_jobs, merged || jsonb_build_object(
        'purge_on', jobrelay_job_purge_on_v1(
            merged ->> 'type', (merged ->> 'finished_at')::timestamptz
        )
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

-- The partition of finished jobs purged on `day`, created unless it exists. NULL when it
-- could not be created now: another session holds a lock past the caller's lock_timeout,
-- or rows of that day already went to finished_jobs_default (they are purged from there).
CREATE FUNCTION jobrelay_finished_partition_v1(day date)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    name text := 'finished_jobs_p' || to_char(day, 'YYYYMMDD');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN name;
    END IF;
    EXECUTE format(
        'CREATE TABLE %I PARTITION OF finished_jobs FOR VALUES FROM (%L) TO (%L)',
        name, day, day + 1
    );
    RETURN name;
EXCEPTION
    WHEN lock_not_available OR check_violation THEN
        RETURN NULL;
END
$$;

-- Drop one partition of finished jobs with the attempt history of its jobs; returns how
-- many jobs it held.
CREATE FUNCTION jobrelay_drop_finished_partition_v1(name text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    held bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %I', name) INTO held;
    EXECUTE format(
        'DELETE FROM job_attempts USING %I AS f WHERE job_attempts.job_id = f.id', name
    );
    EXECUTE format('DROP TABLE %I', name);
    RETURN held;
END
$$;
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


def upgrade() -> None:
    op.execute(UPGRADE)
    # The view lists the columns of `jobs` in its order, for both branches.
    columns = ", ".join(f'"{c}"' for c in _columns("jobs"))
    view = f"SELECT {columns} FROM jobs UNION ALL SELECT {columns} FROM finished_jobs"  # noqa: S608
    op.execute(f"CREATE VIEW all_jobs AS {view}")
    op.execute(
        "COMMENT ON VIEW all_jobs IS 'Every job: the active ones (jobs) and the finished "
        "ones (finished_jobs).'"
    )


def downgrade() -> None:
    columns = ", ".join(f'"{c}"' for c in _columns("jobs"))
    op.execute(f"INSERT INTO jobs ({columns}) SELECT {columns} FROM finished_jobs")  # noqa: S608
    op.execute(
        """
DROP VIEW all_jobs;
DROP FUNCTION jobrelay_drop_finished_partition_v1(text);
DROP FUNCTION jobrelay_finished_partition_v1(date);
DROP FUNCTION jobrelay_finished_job_v1(jobs, jsonb);
DROP FUNCTION jobrelay_job_purge_on_v1(text, timestamptz);
DROP TABLE finished_jobs;
DROP TABLE job_retention;
ALTER TABLE jobs ADD CONSTRAINT jobs_parent_id_fkey
    FOREIGN KEY (parent_id) REFERENCES jobs (id) ON DELETE CASCADE;
"""
    )
