"""Jobs worker: wake-up notifications on enqueue and the per-source head index.

* `jobs_notify_enqueued`: a statement-level AFTER INSERT trigger on `jobs` sends ONE
  `NOTIFY jobrelay_jobs` per insert statement (PostgreSQL folds identical notifications of
  one transaction into one), so workers blocked on LISTEN wake at commit instead of at
  their next poll. Statements that make a job claimable again (release, rescue) notify
  from their own SQL.
* `jobs_pending_source_idx`: the claim finds the sources with pending jobs by a skip scan
  and reads the next pending job of each idle source from it.
* `jobs_pending_class_idx`: the claim reads unserialized pending jobs per class in order;
  without the class in the index, claiming a class with no pending job would walk every
  pending job of the other class.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION jobrelay_jobs_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobrelay_jobs', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_enqueued
    AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_jobs_notify();

CREATE INDEX jobs_pending_class_idx
    ON jobs (concurrency_class, priority, available_at, id)
    WHERE status = 'pending' AND source_key IS NULL;

CREATE INDEX jobs_pending_source_idx
    ON jobs (source_key, priority, available_at, id)
    WHERE status = 'pending' AND source_key IS NOT NULL;
"""

DOWNGRADE = r"""
DROP INDEX jobs_pending_source_idx;
DROP INDEX jobs_pending_class_idx;
DROP TRIGGER jobs_notify_enqueued ON jobs;
DROP FUNCTION jobrelay_jobs_notify();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
