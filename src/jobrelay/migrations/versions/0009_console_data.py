"""Console data (issue 14): the attempt history of jobs, and indexes for the console.

- `job_attempts`: one row per attempt of a job that ENDED without success (a retryable or
  permanent failure, an expired lease swept by the rescue, a running job cancelled), written
  by the same statement that records the failure on the job row, so the job page can show the
  error of every attempt (the job row keeps only `last_error`). Claims and completions write
  nothing here: a successful attempt is the job row itself. The key is (job_id, claim_token)
  (every claim has a fresh token; attempt numbers restart when an operator retries a job or a
  changed revision requeues it). No foreign key to `jobs`: seed 003's deployments may still
  run `jobs` UNLOGGED until the `SET LOGGED` runbook (`jobrelay ops set-logged`), and a
  permanent table cannot reference an unlogged one (nor can `jobs` be set UNLOGGED while one
  does). The pruner deletes the attempts of the jobs it deletes, and of their descendants,
  in its own statement (`prune_finished_jobs.sql`), through the key's leading column.
- `page_import_processing_idx` / `code2des_processing_idx`: `(batch_id) WHERE status = '0'`,
  the children still processing, so the overview's "batches in progress" reads the children in
  flight instead of both tables whole (docs/reference/console.md, "Cost on a big table").
- `jobs_source_key_idx` / `jobs_dedupe_key_idx`: `(key, id) WHERE key IS NOT NULL`, so the
  console's jobs list filtered by source key or dedupe key reads the matching jobs newest
  first instead of the whole history. Partial: jobs without such a key (the diagnostic
  types the peer benchmarks run) pay nothing on insert and update.
- `jobs_class_idx`: `(concurrency_class, id) WHERE concurrency_class <> 'default'`, so the
  list filtered by a class other than the default one reads that class's jobs instead of
  the whole history when the class is rare (a million finished jobs and no `gpu` job: a
  sequential scan of 300 ms without it). Partial: jobs of the default class pay nothing;
  jobs of other classes (`ai`: slow external work) one index entry per row version. The
  default class is the common case, read newest first from the primary key.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE job_attempts (
            job_id uuid NOT NULL,
            claim_token uuid NOT NULL,
            attempt integer NOT NULL,
            worker_id text NULL,
            started_at timestamptz NULL,
            ended_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            outcome text NOT NULL
                CHECK (outcome IN ('retryable', 'permanent', 'lease_expired', 'cancelled')),
            error text NULL,
            PRIMARY KEY (job_id, claim_token)
        )
        """
    )
    op.execute(
        "CREATE INDEX page_import_processing_idx ON page_import (batch_id) WHERE status = '0'"
    )
    op.execute("CREATE INDEX code2des_processing_idx ON code2des (batch_id) WHERE status = '0'")
    op.execute(
        "CREATE INDEX jobs_source_key_idx ON jobs (source_key, id) WHERE source_key IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX jobs_dedupe_key_idx ON jobs (dedupe_key, id) WHERE dedupe_key IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX jobs_class_idx ON jobs (concurrency_class, id) "
        "WHERE concurrency_class <> 'default'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX jobs_class_idx")
    op.execute("DROP INDEX jobs_dedupe_key_idx")
    op.execute("DROP INDEX jobs_source_key_idx")
    op.execute("DROP INDEX code2des_processing_idx")
    op.execute("DROP INDEX page_import_processing_idx")
    op.execute("DROP TABLE job_attempts")
