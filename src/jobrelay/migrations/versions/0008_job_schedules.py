"""`job_schedules`: cron schedules that enqueue jobs, with their durable last and next tick.

One row per schedule (declared with the job types, `JobTypes.schedule`, or in
`JOBRELAY_SCHEDULES`), upserted by every worker at start. A worker's ticker locks the due
rows (`next_tick_at <= now()`, `FOR UPDATE SKIP LOCKED`), enqueues the tick's job and
advances `last_tick_at`/`next_tick_at` in the same transaction: a tick is enqueued once
however many workers run, and the last run survives restarts. Times are database time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE job_schedules (
            name text PRIMARY KEY CHECK (name <> ''),
            cron text NOT NULL,
            timezone text NOT NULL,
            job_type text NOT NULL,
            payload jsonb NOT NULL DEFAULT '{}'::jsonb,
            catch_up text NOT NULL CHECK (catch_up IN ('one', 'skip')),
            last_tick_at timestamptz,
            last_job_id uuid,
            next_tick_at timestamptz NOT NULL,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """
    )
    op.execute("CREATE INDEX job_schedules_next_tick_idx ON job_schedules (next_tick_at)")


def downgrade() -> None:
    op.execute("DROP TABLE job_schedules")
