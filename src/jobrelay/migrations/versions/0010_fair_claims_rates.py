"""Fair claiming and rate limits in the jobs engine (issue 17).

* `jobs.fairness_key` (nullable): the key claims rotate over inside a concurrency class
  (e.g. the organization), computed by the job type at enqueue. NULL keys form one group.
* `jobs_pending_fair_idx`: pending jobs without a source key by class, fairness key, then the
  claim order (priority, available_at, id). The claim statement skip-scans it for the keys
  with pending work and reads the head of each key from it.
* `job_rate_windows`: one row per rate-limited concurrency class: its limit (`max_starts`
  per `period_s`, written by the claimers from their declaration) and the start times of
  its claims in the last period (`starts`, database time). A claim of the class locks the
  row, counts the starts still in the window, claims at most the rest and appends its own
  starts in the same transaction: a sliding window across every worker process.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE jobs ADD COLUMN fairness_key text")
    op.execute(
        "CREATE INDEX jobs_pending_fair_idx ON jobs"
        " (concurrency_class, fairness_key, priority, available_at, id)"
        " WHERE status = 'pending' AND source_key IS NULL"
    )
    op.execute(
        """
        CREATE TABLE job_rate_windows (
            concurrency_class text PRIMARY KEY CHECK (concurrency_class <> ''),
            max_starts integer NOT NULL CHECK (max_starts > 0),
            period_s double precision NOT NULL CHECK (period_s > 0),
            starts timestamptz[] NOT NULL DEFAULT '{}',
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE job_rate_windows")
    op.execute("DROP INDEX jobs_pending_fair_idx")
    op.execute("ALTER TABLE jobs DROP COLUMN fairness_key")
